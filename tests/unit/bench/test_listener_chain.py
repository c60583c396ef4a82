"""bench.listener_chain's listeners: the translator's own, and an on-demand chain that leaves
out exactly the filters that do nothing for the route (the ablation's other side)."""

from __future__ import annotations

from typing import Any

from bench.listener_chain import build, hcm, why_inert

ALL = ["router_only", "on_demand", "stable_default", "stable_full"]


def chain(listeners: Any, name: str) -> list[str]:
    return list(listeners.filters[name])


def test_on_demand_keeps_what_works_on_every_request_and_drops_the_inert_filters() -> None:
    listeners = build(ALL)
    assert chain(listeners, "router_only") == ["envoy.filters.http.router"]
    assert chain(listeners, "on_demand") == [
        "gatehouse.response_headers", "envoy.filters.http.header_mutation", "envoy.filters.http.body_size_limit", "envoy.filters.http.router"]
    assert set(listeners.dropped_as_inert) == set(chain(listeners, "stable_default")) - set(chain(listeners, "on_demand"))
    assert listeners.dropped_as_inert["envoy.filters.http.cache"] == "disabled in the chain; the route does not turn it on"


def test_the_full_gateway_adds_its_filters_and_their_clusters_on_a_closed_local_port() -> None:
    listeners = build(ALL)
    full = chain(listeners, "stable_full")
    assert {"envoy.filters.http.ext_authz", "envoy.filters.http.ratelimit", "envoy.filters.http.adaptive_concurrency"} <= set(full)
    clusters = {c["name"]: c for c in listeners.bootstrap["static_resources"]["clusters"]}
    assert set(clusters) == {"gatehouse_ext_authz", "gatehouse_ratelimit"}
    ports = {c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]["port_value"]
             for c in clusters.values()}
    assert len(ports) == 1 and ports.isdisjoint(listeners.ports.values())
    for listener in listeners.bootstrap["static_resources"]["listeners"]:
        assert listener["address"]["socket_address"]["address"] == "127.0.0.1"
        assert "rds" not in hcm(listener)


def test_a_filter_the_route_configures_is_never_counted_inert() -> None:
    rbac = {"name": "envoy.filters.http.rbac", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC"}}
    assert why_inert(rbac, {"route": {}}) == "RBAC without rules (the route sets none)"
    assert why_inert(rbac, {"typed_per_filter_config": {"envoy.filters.http.rbac": {"rbac": {}}}}) is None
    disabled = {"name": "gatehouse.cache_request", "typed_config": {}, "disabled": True}
    assert why_inert(disabled, {"typed_per_filter_config": {"gatehouse.cache_request": {"@type": "x"}}}) is None
    limit = {"name": "envoy.filters.http.ratelimit", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit"}}
    assert why_inert(limit, {"route": {"rate_limits": [{"actions": []}]}}) is None
    identity = {"name": "envoy.filters.http.header_mutation", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation", "mutations": {"request_mutations": [{"remove": "x-user-id"}]}}}
    assert why_inert(identity, {}) is None
