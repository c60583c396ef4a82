"""The chart is safe by default: whatever the values, no route is served with less protection
than it asks for.

Each value set is rendered with the pinned helm; the control plane's config from its
ConfigMap is translated (the control plane's own translator) with one probe route per
protection a route can ask for. A probe is either refused, or the rendered configs hold
what enforces it: the control plane's `extAuthz` for a token, the sidecar's key store for
API keys, its ticket key for a waiting room, its signer or token exchange for token swap,
the control plane's `rateLimit` for limits (and, on the check's path, the sidecar's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from control_plane.config import ControlPlaneConfig
from control_plane.model import Origin, Route, parse_route_file
from control_plane.translator import RouteTranslator
from control_plane.translator.from_config import gateway_settings
from ext_authz.config import ExtAuthzConfig
from tests.e2e.test_helm_chart import (  # noqa: F401 - fixtures
    CONTROL_PLANE,
    EXT_AUTHZ,
    WITH_ISSUERS,
    find,
    helm_home,
    objects,
    template,
    tools,
)
from tests.harness.kubernetes import KubeTools

PROBES: dict[str, dict[str, Any]] = {
    "token": {"auth": {"scopes": ["orders:read"]}},
    "api-key": {"auth": {"apiKeys": True}},
    "api-key-only": {"auth": {"apiKeys": True, "jwt": False}},
    "validation": {"auth": {"required": False}, "validate": {"query": [{"name": "page", "type": "integer"}]}},
    "waiting-room": {"auth": {"required": False}, "waitingRoom": {"admitPerSecond": 5, "maxWaiting": 10}},
    "signed-swap": {"auth": {"upstreamToken": {"audience": "legacy"}}},
    "exchange-swap": {"auth": {"upstreamToken": {"audience": "legacy", "exchange": {"url": "https://sts.example/token"}}}},
    "limits": {"auth": {"required": False}, "rateLimits": [{"key": "ip", "limit": 5, "window": "10s"}]},
    "token-and-limits": {"rateLimits": [{"key": "user", "limit": 5, "window": "10s"}]},
    "public": {"auth": {"required": False}},
}

VALUE_SETS = {
    "defaults": [],
    "ext-authz": ["--set", "extAuthz.enabled=true,redis.enabled=true", *WITH_ISSUERS],
    "ext-authz-no-revocation": ["--set", "extAuthz.enabled=true,extAuthz.revocation.enabled=false", *WITH_ISSUERS],
    "ext-authz-grpc": ["--set", "extAuthz.enabled=true,extAuthz.protocol=grpc,redis.enabled=true", *WITH_ISSUERS],
    "rate-limits-only": ["--set", "rateLimit.enabled=true,redis.enabled=true"],
    "everything": ["--set", "extAuthz.enabled=true,rateLimit.enabled=true,redis.enabled=true", *WITH_ISSUERS,
                   "--set", "extAuthz.upstreamTokens.enabled=true,extAuthz.upstreamTokens.issuer=https://gw.internal/",
                   "--set", "extAuthz.upstreamTokens.keySecret=upstream-key"],
    "exchange-only": ["--set", "extAuthz.enabled=true,rateLimit.enabled=true,redis.enabled=true", *WITH_ISSUERS,
                      "--set", "extAuthz.upstreamTokens.enabled=true,extAuthz.upstreamTokens.issuer=https://gw.internal/"],
    "fail-open": ["--set", "extAuthz.enabled=true,extAuthz.failOpen=true,redis.enabled=true", *WITH_ISSUERS,
                  "--set", "extAuthz.upstreamTokens.enabled=true,extAuthz.upstreamTokens.issuer=https://gw.internal/"],
    "unlimited-by-choice": ["--set", "controlPlane.rateLimitsWithoutLimiter=serveUnlimited"],
}


def probe_routes() -> list[Route]:
    docs = [
        {"apiVersion": "gatehouse.io/v1alpha1", "kind": "Route", "metadata": {"name": name, "namespace": "shop"},
         "spec": {"match": {"pathPrefix": f"/{name}"}, "backends": [{"service": "svc", "port": 8080}], **spec}}
        for name, spec in PROBES.items()
    ]
    routes, problems = parse_route_file(yaml.safe_dump_all(docs), Origin("file", "probes.yaml"))
    assert problems == [], [str(p) for p in problems]
    return routes


def rendered(tools: KubeTools, home: Path, values: list[str]) -> tuple[ControlPlaneConfig, ExtAuthzConfig | None]:
    docs = objects(template(tools, home, *values))
    cp_data = yaml.safe_load(find(docs, "ConfigMap", CONTROL_PLANE)["data"]["control-plane.yaml"])
    control_plane = ControlPlaneConfig.model_validate(cp_data)
    authz = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == EXT_AUTHZ]
    sidecar = ExtAuthzConfig.model_validate(yaml.safe_load(authz[0]["data"]["ext-authz.yaml"])) if authz else None
    return control_plane, sidecar


def enforced_by(name: str, route: Route, cp: ControlPlaneConfig, sidecar: ExtAuthzConfig | None) -> list[str]:
    """What the rendered configs lack to enforce what the probe asks (empty: all there)."""
    spec = route.spec
    missing = []
    http = sidecar.http if sidecar is not None else None
    if spec.auth.required and (cp.ext_authz is None or sidecar is None):
        missing.append("a check for its credential")
    if spec.auth.api_keys and (sidecar is None or sidecar.revocation is None or http is None):
        missing.append("the sidecar's key store over the HTTP check")
    if spec.validate_ is not None and (cp.ext_authz is None or cp.ext_authz.protocol != "http" or http is None):
        missing.append("the HTTP check for its rules")
    if spec.waiting_room is not None and (http is None or http.waiting_room is None):
        missing.append("the sidecar's ticket key")
    swap = spec.auth.upstream_token
    if swap is not None:
        if http is None or http.upstream_tokens is None or (cp.ext_authz is not None and cp.ext_authz.fail_open):
            missing.append("token swap in the sidecar, failing closed")
        elif swap.exchange is None and http.upstream_tokens.key_file is None:
            missing.append("the sidecar's signing key")
    if spec.rate_limits and cp.rate_limit is None:
        missing.append("a rate-limit service")
    on_the_check = cp.rate_limit is not None and cp.ext_authz is not None and cp.ext_authz.protocol == "http"
    if spec.rate_limits and spec.auth.required and on_the_check and (http is None or http.rate_limit is None):
        missing.append("the check's limiter")
    return missing


@pytest.mark.parametrize("values", list(VALUE_SETS.values()), ids=list(VALUE_SETS))
def test_no_route_is_served_with_less_protection_than_it_asks_for(tools: KubeTools, helm_home: Path, values: list[str]) -> None:  # noqa: F811
    cp, sidecar = rendered(tools, helm_home, values)
    translator = RouteTranslator(gateway_settings(cp, cp.gateway))
    routes = probe_routes()
    served = {route.id for route in translator.translate(routes).model}
    assert "shop/public" in served, "a route asking for nothing is always served"
    unlimited = cp.rate_limits_without_limiter == "serveUnlimited"
    for route in routes:
        if route.id not in served:
            assert translator.problems[route.id].reason == "Unenforceable", route.id
            continue
        missing = enforced_by(route.name, route, cp, sidecar)
        if unlimited and missing == ["a rate-limit service"]:
            note = translator.problems[route.id]
            assert note.served and "rateLimits: not enforced" in note.message, "served unlimited only loudly"
            continue
        assert missing == [], f"{route.id} is served without {missing}"


def test_the_defaults_serve_only_what_asks_for_nothing(tools: KubeTools, helm_home: Path) -> None:  # noqa: F811
    cp, sidecar = rendered(tools, helm_home, [])
    translator = RouteTranslator(gateway_settings(cp, cp.gateway))
    served = {route.id for route in translator.translate(probe_routes()).model}
    assert served == {"shop/public"}
    assert sidecar is None and cp.ext_authz is None and cp.rate_limits_without_limiter == "refuse"
    assert "Helm: extAuthz.enabled=true with extAuthz.issuers" in translator.problems["shop/token"].message
    assert "Helm: rateLimit.enabled=true" in translator.problems["shop/limits"].message


def test_with_breakers_on_envoy_flushes_its_access_log_every_200ms(tools: KubeTools, helm_home: Path) -> None:  # noqa: F811
    cp, _ = rendered(tools, helm_home, ["--set", "telemetry.enabled=true"])
    assert cp.access_log is not None and cp.access_log.flush_interval == 200, "breaker detection does not wait a second"
    cp, _ = rendered(tools, helm_home, ["--set", "telemetry.enabled=true,breakers.enabled=false"])
    assert cp.access_log is not None and cp.access_log.flush_interval == 1000
    cp, _ = rendered(tools, helm_home, ["--set", "telemetry.enabled=true,telemetry.envoyFlushInterval=50ms"])
    assert cp.access_log is not None and cp.access_log.flush_interval == 50
