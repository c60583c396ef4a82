"""The Envoy side of ext_authz: identity headers stripped first on every route, then the
ext_authz filter (when configured), then the router; the service cluster; per-route
settings (off for public routes, requirements as context_extensions otherwise)."""

from __future__ import annotations

from typing import Any

import pytest

from control_plane.config import ControlPlaneConfig
from control_plane.model import Origin, parse_route_file
from control_plane.render import resource_data
from control_plane.translator.from_config import gateway_settings
from control_plane.translator import GatewaySettings, RouteTranslator, Translation
from control_plane.translator.ext_authz import (
    EXT_AUTHZ_CLUSTER,
    EXT_AUTHZ_FILTER,
    EXT_AUTHZ_PER_ROUTE_TYPE,
    EXT_AUTHZ_TYPE,
    ExtAuthzSettings,
)
from control_plane.translator.identity_headers import HEADER_MUTATION_FILTER
from control_plane.translator.messages import HEADER_MUTATION_TYPE
from control_plane.translator.request_limits import BODY_SIZE_LIMIT_FILTER
from control_plane.translator.response_headers import RESPONSE_HEADERS_FILTER
from ext_authz.config import IDENTITY_HEADERS as SERVICE_IDENTITY_HEADERS

ROUTER_FILTER = "envoy.filters.http.router"
ADDRESSES = (("127.0.0.1", 9191), ("authz.internal", 9292), ("10.0.0.7", 9393))

ROUTES_YAML = """
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: orders, namespace: shop}
spec:
  match: {pathPrefix: /orders}
  backends: [{service: orders, port: 8080}]
  auth: {audiences: [api, web], scopes: ["orders:read", "orders:write"], roles: [clerk, admin]}
---
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: public, namespace: shop}
spec:
  match: {pathPrefix: /public}
  backends: [{service: web, port: 8080}]
  auth: {required: false}
---
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: plain, namespace: shop}
spec:
  match: {pathPrefix: /plain}
  backends: [{service: web, port: 8080}]
---
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: scoped, namespace: shop}
spec:
  match: {pathPrefix: /scoped}
  backends: [{service: web, port: 8080}]
  auth: {scopes: ["catalog:read"]}
---
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: retried, namespace: shop}
spec:
  match: {path: "/retried/{id}"}
  backends: [{service: web, port: 8080}]
  retries: {attempts: 2}
  auth: {roles: [ops]}
---
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: public-retried, namespace: shop}
spec:
  match: {path: "/open/{id}"}
  backends: [{service: web, port: 8080}]
  retries: {attempts: 2}
  auth: {required: false}
"""


def routes() -> list[Any]:
    parsed, problems = parse_route_file(ROUTES_YAML, Origin("file", "routes.yaml"))
    assert problems == [], [str(p) for p in problems]
    return parsed


def translate(settings: GatewaySettings) -> Translation:
    return RouteTranslator(settings).translate(routes())


def with_authz(**kwargs: Any) -> GatewaySettings:
    return GatewaySettings(ext_authz=ExtAuthzSettings(ADDRESSES, **kwargs))


def hcm(translation: Translation) -> dict[str, Any]:
    [listener] = [resource_data(r) for r in translation.listeners]
    [chain] = listener["filter_chains"]
    [network_filter] = chain["filters"]
    config: dict[str, Any] = network_filter["typed_config"]
    return config


def http_filters(translation: Translation) -> list[dict[str, Any]]:
    filters: list[dict[str, Any]] = hcm(translation)["http_filters"]
    return filters


def filter_named(translation: Translation, name: str) -> dict[str, Any]:
    [found] = [f for f in http_filters(translation) if f["name"] == name]
    config: dict[str, Any] = found["typed_config"]
    return config


def entries_by_route(translation: Translation) -> dict[str, list[dict[str, Any]]]:
    [config] = [resource_data(r) for r in translation.routes]
    out: dict[str, list[dict[str, Any]]] = {}
    for vhost in config["virtual_hosts"]:
        for entry in vhost.get("routes", []):
            out.setdefault(entry["name"], []).append(entry)
    return out


def clusters(translation: Translation) -> dict[str, dict[str, Any]]:
    return {r.name: resource_data(r) for r in translation.clusters}


# --- the filter chain ---------------------------------------------------------------------------


def test_filters_run_header_mutation_then_ext_authz_then_router() -> None:
    # Around them: the response-header filter first, the body size limit before ext_authz
    # (tests/unit/translator/test_gateway_limits.py).
    filters = http_filters(translate(with_authz()))
    assert [f["name"] for f in filters] == [
        RESPONSE_HEADERS_FILTER, HEADER_MUTATION_FILTER, BODY_SIZE_LIMIT_FILTER,
        "envoy.filters.http.rbac", "envoy.filters.http.local_ratelimit", EXT_AUTHZ_FILTER, ROUTER_FILTER
    ]
    assert filters[1]["typed_config"]["@type"] == HEADER_MUTATION_TYPE
    assert filters[5]["typed_config"]["@type"] == EXT_AUTHZ_TYPE


@pytest.mark.parametrize("settings", [GatewaySettings(), with_authz()], ids=["without-ext-authz", "with-ext-authz"])
def test_the_header_mutation_removes_every_identity_header(settings: GatewaySettings) -> None:
    config = filter_named(translate(settings), HEADER_MUTATION_FILTER)
    removed = [m["remove"] for m in config["mutations"]["request_mutations"]]
    assert removed == ["x-user-id", "x-user-role", "x-scope"]
    assert set(removed) == set(SERVICE_IDENTITY_HEADERS), "the translator strips what the service sets by default"
    assert "response_mutations" not in config["mutations"]


def test_ext_authz_filter_settings() -> None:
    config = filter_named(translate(with_authz()), EXT_AUTHZ_FILTER)
    assert config["transport_api_version"] == "V3"
    assert config["grpc_service"]["envoy_grpc"]["cluster_name"] == EXT_AUTHZ_CLUSTER
    assert config["grpc_service"]["timeout"] == "0.250s"
    patterns = config["allowed_headers"]["patterns"]
    assert patterns == [{"exact": "authorization", "ignore_case": True}, {"exact": "x-request-id", "ignore_case": True}]
    assert config.get("failure_mode_allow", False) is False, "fail closed by default"
    assert config["status_on_error"] == {"code": "ServiceUnavailable"}
    assert "with_request_body" not in config
    assert not config.get("include_peer_certificate", False)


def test_fail_open_and_timeout_are_configurable() -> None:
    config = filter_named(translate(with_authz(timeout_ms=1500, fail_open=True)), EXT_AUTHZ_FILTER)
    assert config["failure_mode_allow"] is True
    assert config["grpc_service"]["timeout"] == "1.500s"
    assert config["status_on_error"] == {"code": "ServiceUnavailable"}


def test_without_ext_authz_only_the_header_mutation_and_router_run() -> None:
    translation = translate(GatewaySettings())
    assert [f["name"] for f in http_filters(translation)] == [
        RESPONSE_HEADERS_FILTER, HEADER_MUTATION_FILTER, BODY_SIZE_LIMIT_FILTER,
        "envoy.filters.http.rbac", "envoy.filters.http.local_ratelimit", ROUTER_FILTER
    ]
    assert EXT_AUTHZ_CLUSTER not in clusters(translation)
    for name, entries in entries_by_route(translation).items():
        for entry in entries:
            assert "typed_per_filter_config" not in entry, f"{name}: per-route ext_authz without the filter"


# --- the cluster --------------------------------------------------------------------------------


def test_the_ext_authz_cluster_speaks_http2_to_every_address() -> None:
    cluster = clusters(translate(with_authz()))[EXT_AUTHZ_CLUSTER]
    assert cluster["type"] in ("STATIC", "STRICT_DNS")
    assert "eds_cluster_config" not in cluster
    options = cluster["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
    assert "http2_protocol_options" in options["explicit_http_config"]
    assignment = cluster["load_assignment"]
    assert assignment["cluster_name"] == EXT_AUTHZ_CLUSTER
    addresses = [
        (e["endpoint"]["address"]["socket_address"]["address"], e["endpoint"]["address"]["socket_address"]["port_value"])
        for group in assignment["endpoints"]
        for e in group["lb_endpoints"]
    ]
    assert addresses == list(ADDRESSES)
    assert cluster["connect_timeout"]


def test_the_ext_authz_cluster_is_not_tied_to_any_route() -> None:
    translation = translate(with_authz())
    [resource] = [r for r in translation.clusters if r.name == EXT_AUTHZ_CLUSTER]
    assert resource.provenance == ()
    assert EXT_AUTHZ_CLUSTER not in {ref.name for ref in translation.cluster_refs}


# --- per route ----------------------------------------------------------------------------------


def per_route(entry: dict[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = entry["typed_per_filter_config"][EXT_AUTHZ_FILTER]
    assert config["@type"] == EXT_AUTHZ_PER_ROUTE_TYPE
    return config


def test_public_routes_disable_ext_authz() -> None:
    entries = entries_by_route(translate(with_authz()))
    for name in ("shop/public", "shop/public-retried"):
        assert entries[name], name
        for entry in entries[name]:
            config = per_route(entry)
            assert config["disabled"] is True
            assert "check_settings" not in config


def test_authenticated_routes_carry_their_requirements() -> None:
    entries = entries_by_route(translate(with_authz()))
    [orders] = entries["shop/orders"]
    config = per_route(orders)
    assert "disabled" not in config
    assert config["check_settings"]["context_extensions"] == {
        "route": "shop/orders",
        "audiences": "api web",
        "scopes": "orders:read orders:write",
        "roles": "clerk admin",
    }
    [scoped] = entries["shop/scoped"]
    assert per_route(scoped)["check_settings"]["context_extensions"] == {"route": "shop/scoped", "scopes": "catalog:read"}


def test_a_route_with_no_requirements_still_checks_the_token() -> None:
    [plain] = entries_by_route(translate(with_authz()))["shop/plain"]
    config = per_route(plain)
    assert "disabled" not in config
    assert config["check_settings"]["context_extensions"] == {"route": "shop/plain"}


def test_every_entry_of_a_split_route_carries_the_same_settings() -> None:
    entries = entries_by_route(translate(with_authz()))["shop/retried"]
    assert len(entries) >= 2, "idempotent and other methods are separate entries"
    configs = [per_route(e) for e in entries]
    assert all(c == configs[0] for c in configs)
    assert configs[0]["check_settings"]["context_extensions"] == {"route": "shop/retried", "roles": "ops"}


def test_every_route_gets_a_per_route_config_when_ext_authz_is_on() -> None:
    entries = entries_by_route(translate(with_authz()))
    assert set(entries) == {
        "shop/orders", "shop/public", "shop/plain", "shop/scoped", "shop/retried", "shop/public-retried"
    }
    for name, route_entries in entries.items():
        for entry in route_entries:
            assert EXT_AUTHZ_FILTER in entry["typed_per_filter_config"], name


# --- from the control plane config --------------------------------------------------------------


def config(ext_authz: dict[str, Any] | None) -> ControlPlaneConfig:
    data: dict[str, Any] = {"sources": {}}
    if ext_authz is not None:
        data["extAuthz"] = ext_authz
    return ControlPlaneConfig.model_validate(data)


def test_control_plane_config_becomes_ext_authz_settings() -> None:
    cp = config({"address": ["127.0.0.1:9191", "authz.internal:9292"], "timeout": "100ms", "failOpen": True})
    settings = gateway_settings(cp, cp.gateway)
    assert settings.ext_authz == ExtAuthzSettings((("127.0.0.1", 9191), ("authz.internal", 9292)), 100, True)
    single = config({"address": "127.0.0.1:9191"})
    assert gateway_settings(single, single.gateway).ext_authz == ExtAuthzSettings((("127.0.0.1", 9191),), 250, False)
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
    from ext_authz.requirements import check_requirements

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
