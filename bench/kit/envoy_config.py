"""Hand-written static Envoy configuration for the benchmarks that start an Envoy of their own
(not through the control plane): addresses, an HTTP connection manager, and the "fast"
upstream, an Envoy that answers 200 itself (the cheapest upstream at hand: the Python echo
upstream costs more CPU than Envoy does)."""

from __future__ import annotations

from typing import Any

ROUTER_TYPE = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
HCM_TYPE = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"


def address(port: int) -> dict[str, Any]:
    """127.0.0.1:``port``, as Envoy's JSON has it."""
    return {"socket_address": {"address": "127.0.0.1", "port_value": port}}


def router_filter() -> dict[str, Any]:
    return {"name": "envoy.filters.http.router", "typed_config": {"@type": ROUTER_TYPE}}


def http_connection_manager(name: str, routes: list[dict[str, Any]], filters: list[dict[str, Any]]) -> dict[str, Any]:
    """One virtual host for every domain with ``routes``; ``filters`` and then the router."""
    return {
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": {
            "@type": HCM_TYPE,
            "stat_prefix": name,
            "codec_type": "AUTO",
            "route_config": {"name": name, "virtual_hosts": [{"name": name, "domains": ["*"], "routes": routes}]},
            "http_filters": [*filters, router_filter()],
        },
    }


def fast_upstream_bootstrap(port: int, admin_port: int) -> dict[str, Any]:
    """A static Envoy that answers every request 200 itself: the cheapest upstream at hand."""
    route = {"match": {"prefix": "/"}, "direct_response": {"status": 200, "body": {"inline_string": "ok"}}}
    return {
        "admin": {"address": address(admin_port)},
        "static_resources": {"listeners": [{"name": "fast", "address": address(port),
                                            "filter_chains": [{"filters": [http_connection_manager("fast", [route], [])]}]}]},
    }
