"""Static clusters for Gatehouse's own services (ext_authz, ratelimit, telemetry): no EDS."""

from __future__ import annotations

from typing import Any

HTTP_PROTOCOL_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
HTTP_PROTOCOL_OPTIONS_TYPE = "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions"


def grpc_service_cluster(name: str, addresses: tuple[tuple[str, int], ...]) -> dict[str, Any]:
    """HTTP/2 to every address (usually one sidecar on localhost); Envoy balances over several."""
    return _service_cluster(name, addresses, {"http2_protocol_options": {}})


def http_service_cluster(name: str, addresses: tuple[tuple[str, int], ...]) -> dict[str, Any]:
    """HTTP/1.1 with keep-alive: Envoy's HTTP ext_authz client holds one request per
    connection, so the pool's connections are what carries concurrent checks."""
    return _service_cluster(name, addresses, {"http_protocol_options": {}})


def _service_cluster(name: str, addresses: tuple[tuple[str, int], ...], protocol: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "type": "STRICT_DNS",
        "connect_timeout": "1s",
        "typed_extension_protocol_options": {
            HTTP_PROTOCOL_OPTIONS: {"@type": HTTP_PROTOCOL_OPTIONS_TYPE, "explicit_http_config": protocol}
        },
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [
                {
                    "lb_endpoints": [
                        {"endpoint": {"address": {"socket_address": {"address": host, "port_value": port}}}}
                        for host, port in addresses
                    ]
                }
            ],
        },
    }
