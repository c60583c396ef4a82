"""The Envoy side of ext_authz beyond its golden case (testdata/in/ext_authz.yaml pins the
filter chain, the filter's settings, the service cluster and every route's per-route
settings): identity headers stripped with or without ext_authz, the configurable timeout
and failure mode, nothing wired without it, the config file's `extAuthz` block, and
requirement names that survive the trip to the service."""

from __future__ import annotations

from typing import Any

import pytest

from control_plane.config import ControlPlaneConfig
from control_plane.model import Origin, parse_route_file
from control_plane.translator.from_config import gateway_settings
from control_plane.translator import GatewaySettings, RouteTranslator, Translation
from control_plane.translator.ext_authz import EXT_AUTHZ_CLUSTER, EXT_AUTHZ_FILTER, ExtAuthzSettings
from control_plane.translator.identity_headers import HEADER_MUTATION_FILTER
from control_plane.translator.request_limits import BODY_SIZE_LIMIT_FILTER
from control_plane.translator.response_headers import RESPONSE_HEADERS_FILTER
from ext_authz.config import Issuer
from tests.unit.control_plane.translator.envoy_data import clusters_by_name, entries_by_route, filter_config, filter_names
from tests.unit.control_plane.translator.golden import IN_DIR

ROUTER_FILTER = "envoy.filters.http.router"
ADDRESSES = (("127.0.0.1", 9191), ("authz.internal", 9292), ("10.0.0.7", 9393))


def routes() -> list[Any]:
    """The golden case's routes: public, plain, scoped, split by retries."""
    parsed, problems = parse_route_file((IN_DIR / "ext_authz.yaml").read_bytes(), Origin("file", "ext_authz.yaml"))
    assert problems == [], [str(p) for p in problems]
    return parsed


def translate(settings: GatewaySettings) -> Translation:
    return RouteTranslator(settings).translate(routes())


def with_authz(**kwargs: Any) -> GatewaySettings:
    return GatewaySettings(ext_authz=ExtAuthzSettings(ADDRESSES, **kwargs))


# --- the filter chain ---------------------------------------------------------------------------


@pytest.mark.parametrize("settings", [GatewaySettings(), with_authz()], ids=["without-ext-authz", "with-ext-authz"])
def test_the_header_mutation_removes_every_identity_header(settings: GatewaySettings) -> None:
    config = filter_config(translate(settings), HEADER_MUTATION_FILTER)
    removed = [m["remove"] for m in config["mutations"]["request_mutations"]]
    assert removed == ["x-user-id", "x-user-role", "x-scope", "x-consumer", "x-principal", "x-gatehouse-cache-control"]
    defaults = Issuer.model_validate({"issuer": "https://i/", "jwksFile": "k.json"}).claim_headers
    assert set(defaults) <= set(removed), "the translator strips what the service sets by default"
    assert "response_mutations" not in config["mutations"]


def test_fail_open_and_timeout_are_configurable() -> None:
    config = filter_config(translate(with_authz(timeout_ms=1500, fail_open=True)), EXT_AUTHZ_FILTER)
    assert config["failure_mode_allow"] is True
    assert config["grpc_service"]["timeout"] == "1.500s"
    assert config["status_on_error"] == {"code": "ServiceUnavailable"}


def test_without_ext_authz_only_the_header_mutation_and_router_run() -> None:
    translation = translate(GatewaySettings())
    assert filter_names(translation) == [
        RESPONSE_HEADERS_FILTER, HEADER_MUTATION_FILTER, BODY_SIZE_LIMIT_FILTER,
        "envoy.filters.http.rbac", "envoy.filters.http.local_ratelimit", "gatehouse.breaker_reroute",
        "gatehouse.cache_request", "envoy.filters.http.cache", ROUTER_FILTER
    ]
    assert EXT_AUTHZ_CLUSTER not in clusters_by_name(translation)
    for name, entries in entries_by_route(translation).items():
        for entry in entries:
            assert "typed_per_filter_config" not in entry, f"{name}: per-route ext_authz without the filter"


# --- the cluster --------------------------------------------------------------------------------


def test_the_ext_authz_cluster_is_not_tied_to_any_route() -> None:
    translation = translate(with_authz())
    [resource] = [r for r in translation.clusters if r.name == EXT_AUTHZ_CLUSTER]
    assert resource.provenance == ()
    assert EXT_AUTHZ_CLUSTER not in {ref.name for ref in translation.cluster_refs}


# --- from the control plane config --------------------------------------------------------------


def config(ext_authz: dict[str, Any] | None) -> ControlPlaneConfig:
    data: dict[str, Any] = {"sources": {}}
    if ext_authz is not None:
        data["extAuthz"] = ext_authz
    return ControlPlaneConfig.model_validate(data)


def test_control_plane_config_becomes_ext_authz_settings() -> None:
    cp = config({"address": ["127.0.0.1:9191", "authz.internal:9292"], "timeout": "100ms", "failOpen": True, "protocol": "grpc"})
    settings = gateway_settings(cp, cp.gateway)
    assert settings.ext_authz == ExtAuthzSettings((("127.0.0.1", 9191), ("authz.internal", 9292)), 100, True)
    single = config({"address": "127.0.0.1:9191"})
    # HTTP is the default protocol (the lean path); header names are matched lower-case.
    assert gateway_settings(single, single.gateway).ext_authz == ExtAuthzSettings((("127.0.0.1", 9191),), 250, False, "http")
    forwarded = config({"address": "127.0.0.1:9196", "forwardHeaders": ["X-Tenant"]})
    assert gateway_settings(forwarded, forwarded.gateway).ext_authz == ExtAuthzSettings(
        (("127.0.0.1", 9196),), 250, False, "http", ("x-tenant",)
    )
    none = config(None)
    assert gateway_settings(none, none.gateway).ext_authz is None


def test_a_bracketed_ipv6_address_loses_its_brackets() -> None:
    cp = config({"address": "[::1]:9191"})
    settings = gateway_settings(cp, cp.gateway)
    assert settings.ext_authz is not None
    assert settings.ext_authz.addresses == (("::1", 9191),)


# --- requirement names survive the trip to the service ------------------------------------------

AUTH_ITEM_CASES = {
    # (auth block, claims of a token that must NOT pass the route)
    "role-with-a-space": ('{roles: ["team lead"]}', {"role": "team"}),
    "audience-with-a-space": ('{audiences: ["billing api"]}', {"aud": "api"}),
    "empty-role": ('{roles: [""]}', {"role": "anything"}),
    "blank-scope": ('{scopes: [" "]}', {"scope": ""}),
}


@pytest.mark.parametrize("case", list(AUTH_ITEM_CASES))
def test_a_route_requirement_is_refused_or_enforced_as_written(case: str) -> None:
    from control_plane.translator.ext_authz import per_route
    from ext_authz.errors import ForbiddenError
    from ext_authz.tokens.requirements import check_requirements

    auth, weaker_claims = AUTH_ITEM_CASES[case]
    text = (
        "apiVersion: gatehouse.io/v1alpha1\nkind: Route\nmetadata: {name: r, namespace: shop}\n"
        f"spec:\n  match: {{pathPrefix: /r}}\n  backends: [{{service: a, port: 80}}]\n  auth: {auth}\n"
    )
    parsed, problems = parse_route_file(text, Origin("file", "r.yaml"))
    if problems:  # refused up front, with the field named: fine
        assert parsed == [] and any("auth." in str(p) for p in problems), [str(p) for p in problems]
        return
    [route] = parsed
    extensions = per_route(route)["check_settings"]["context_extensions"]
    with pytest.raises(ForbiddenError):
        check_requirements(weaker_claims, extensions)


def test_over_http_a_header_key_envoy_would_not_forward_quarantines_the_route() -> None:
    from control_plane.model import Origin, parse_route_file
    from control_plane.translator import RouteTranslator
    from control_plane.translator.settings import GatewaySettings, RateLimitSettings

    text = """
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: orders, namespace: shop}
spec:
  match: {pathPrefix: /orders}
  backends: [{service: orders, port: 8080}]
  rateLimits: [{key: "header:x-tenant", limit: 5, window: 1s}]
"""
    routes, problems = parse_route_file(text, Origin("file", "orders.yaml"))
    assert problems == []
    http = ExtAuthzSettings((("127.0.0.1", 9196),), protocol="http")
    translator = RouteTranslator(GatewaySettings(ext_authz=http, rate_limit=RateLimitSettings((("127.0.0.1", 8081),))))
    translation = translator.translate(list(routes))
    assert translation.model == ()
    problem = translator.quarantined["shop/orders"]
    assert "orders.yaml" in problem and "rateLimits[0].key: header:x-tenant" in problem and "extAuthz.forwardHeaders" in problem
    forwarded = ExtAuthzSettings((("127.0.0.1", 9196),), protocol="http", forward_headers=("x-tenant",))
    again = RouteTranslator(GatewaySettings(ext_authz=forwarded, rate_limit=RateLimitSettings((("127.0.0.1", 8081),))))
    assert [r.id for r in again.translate(list(routes)).model] == ["shop/orders"]
