"""Rate limits in Envoy config and in the policies ratelimit_svc receives."""

from __future__ import annotations

from typing import Any

from control_plane.model import Origin, parse_route_file
from control_plane.render import resource_data
from control_plane.translator import GatewaySettings, RouteTranslator
from control_plane.translator.ext_authz import ExtAuthzSettings
from control_plane.translator.ratelimit import RateLimitSettings

ROUTES = """\
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: orders, namespace: shop}
spec:
  match: {pathPrefix: /orders}
  backends: [{service: orders, port: 80}]
  rateLimits:
    - {key: user, limit: 100, window: 60s}
    - {key: ip, algorithm: tokenBucket, capacity: 5, refill: 1/10s, mode: hybrid, onStoreFailure: closed}
    - {key: "header:x-tenant", algorithm: fixedWindow, limit: 1000, window: 1h, shadow: true}
    - {key: apiKey, limit: 10, window: 1s}
---
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: open, namespace: shop}
spec:
  match: {pathPrefix: /open}
  backends: [{service: orders, port: 80}]
"""

SETTINGS = GatewaySettings(
    ext_authz=ExtAuthzSettings((("127.0.0.1", 9191),)), rate_limit=RateLimitSettings((("127.0.0.1", 8081),), 100, False)
)


def translate(settings: GatewaySettings = SETTINGS) -> Any:
    routes, problems = parse_route_file(ROUTES, Origin("git", "r.yaml", "abc"))
    assert problems == []
    return RouteTranslator(settings).translate(routes)


def test_filters_run_identity_strip_then_authz_then_ratelimit_then_router() -> None:
    translation = translate()
    [listener] = [resource_data(r) for r in translation.listeners]
    hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
    names = [f["name"] for f in hcm["http_filters"]]
    assert names == [
        "gatehouse.response_headers",
        "envoy.filters.http.header_mutation",
        "envoy.filters.http.body_size_limit",
        "envoy.filters.http.rbac",
        "envoy.filters.http.local_ratelimit",
        "envoy.filters.http.ext_authz",
        "envoy.filters.http.ratelimit",
        "envoy.filters.http.router",
    ]
    ratelimit = hcm["http_filters"][6]["typed_config"]
    assert ratelimit["domain"] == "gatehouse"
    assert "enable_x_ratelimit_headers" not in ratelimit, "OFF (the default): the service sets the headers"
    assert ratelimit["disable_x_envoy_ratelimited_header"] is True
    assert ratelimit["rate_limit_service"]["grpc_service"]["envoy_grpc"]["cluster_name"] == "gatehouse_ratelimit"
    assert "gatehouse_ratelimit" in [c.name for c in translation.clusters]


def test_each_limit_is_a_descriptor_naming_the_limit_and_carrying_the_key() -> None:
    [config] = [resource_data(r) for r in translate().routes]
    entries = {e["name"]: e for v in config["virtual_hosts"] for e in v.get("routes", [])}
    limits = entries["shop/orders"]["route"]["rate_limits"]
    assert [a["actions"][0]["generic_key"] for a in limits] == [
        {"descriptor_key": "limit", "descriptor_value": f"shop/orders#{i}"} for i in range(4)
    ]
    assert [a["actions"][1] for a in limits] == [
        {"request_headers": {"header_name": "x-user-id", "descriptor_key": "user"}},
        {"remote_address": {}},
        {"request_headers": {"header_name": "x-tenant", "descriptor_key": "header:x-tenant"}},
        {"request_headers": {"header_name": "x-api-key", "descriptor_key": "apiKey"}},
    ]
    assert "rate_limits" not in entries["shop/open"]["route"]


def test_policies_carry_every_limit_parameter() -> None:
    translation = translate()
    [policy] = [resource_data(r) for r in translation.ratelimits]
    assert policy["route"] == "shop/orders"
    by_id = {limit["id"]: limit for limit in policy["limits"]}
    assert by_id["shop/orders#0"] == {
        "id": "shop/orders#0", "key": "user", "algorithm": "slidingWindow", "limit": "100", "window_ms": "60000",
        "mode": "exact", "on_store_failure": "local",
    }
    assert by_id["shop/orders#1"]["algorithm"] == "tokenBucket"
    assert (by_id["shop/orders#1"]["limit"], by_id["shop/orders#1"]["refill_tokens"], by_id["shop/orders#1"]["window_ms"]) == ("5", "1", "10000")
    assert (by_id["shop/orders#1"]["mode"], by_id["shop/orders#1"]["on_store_failure"]) == ("hybrid", "closed")
    assert by_id["shop/orders#2"]["shadow"] is True


def test_without_a_ratelimit_service_nothing_is_wired() -> None:
    translation = translate(GatewaySettings())
    assert translation.ratelimits == ()
    [config] = [resource_data(r) for r in translation.routes]
    assert all("rate_limits" not in e.get("route", {}) for v in config["virtual_hosts"] for e in v.get("routes", []))
