"""The gateway's HTTP listener: one HTTP connection manager that takes its routes over RDS."""

from __future__ import annotations

from typing import Any

from control_plane.translator.access_log import access_log
from control_plane.translator.ext_authz import ext_authz_filter, identity_header_filter
from control_plane.translator.load_shedding import shed_filter
from control_plane.translator.local_replies import local_reply_config
from control_plane.translator.ratelimit import ratelimit_filter
from control_plane.translator.request_limits import body_size_limit_filter, response_headers_filter
from control_plane.translator.settings import GatewaySettings
from control_plane.translator.shields import rbac_filter, shield_filter
from control_plane.translator.tls import hsts_filter, transport_socket
from control_plane.translator.messages import Listener, parse
from control_plane.translator.names import LISTENER_NAME, ROUTE_CONFIG_NAME

HCM_TYPE = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
ROUTER_TYPE = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"


def http_filters(settings: GatewaySettings) -> list[dict[str, Any]]:
    """Internal response headers are removed by the first filter (the last to see a response,
    local replies included). Identity headers are stripped next, always; then an oversized body
    is refused before anyone spends work on it; then a route's IP access list (RBAC, 403) and its
    local rate-limit shield (429), both inert unless the route configures them, and the
    low-priority concurrency limit (503, only on ``low`` routes), so a flood is cut before ext_authz (which sets the identity headers from the token) and the global rate limit
    (which may key on them), if configured; then the router, which adds no ``x-envoy-*`` headers
    of its own."""
    filters = [response_headers_filter(remove_server=not settings.server_header), identity_header_filter()]
    if settings.max_request_body_bytes:
        filters.append(body_size_limit_filter(settings.max_request_body_bytes))
    filters.extend([rbac_filter(), shield_filter()])
    if settings.shedding is not None:
        filters.append(shed_filter(settings.shedding))
    if settings.ext_authz is not None:
        filters.append(ext_authz_filter(settings.ext_authz))
    if settings.rate_limit is not None:
        filters.append(ratelimit_filter(settings.rate_limit))
    filters.append(
        {"name": "envoy.filters.http.router", "typed_config": {"@type": ROUTER_TYPE, "suppress_envoy_headers": True}}
    )
    return filters


def http_connection_manager(settings: GatewaySettings) -> dict[str, Any]:
    hcm = {
        "@type": HCM_TYPE,
        "stat_prefix": "gatehouse",
        "codec_type": "AUTO",
        "rds": {
            "route_config_name": ROUTE_CONFIG_NAME,
            "config_source": {"ads": {}, "resource_api_version": "V3"},
        },
        "http_filters": http_filters(settings),
        # The gateway is the edge: the client address is the peer, never a forwarded header.
        "use_remote_address": True,
        # One canonical path before matching, so /a/../admin or //admin cannot dodge a route.
        "normalize_path": True,
        "merge_slashes": True,
        "path_with_escaped_slashes_action": "UNESCAPE_AND_REDIRECT",
        "strip_any_host_port": True,
        # A caller's x-request-id is kept for correlation; Envoy generates one when absent,
        # sends it upstream, and returns it on every response (local replies too).
        "preserve_external_request_id": True,
        "always_set_request_id_in_response": True,
        # Oversized request headers: 431, before any filter runs.
        "max_request_headers_kb": settings.max_request_headers_kb,
        # The gateway's own errors (404, 413, 431, 429, 503, 504) as one JSON body.
        "local_reply_config": local_reply_config(),
        # x_user_id must not pass as a second spelling of x-user-id.
        "common_http_protocol_options": {"headers_with_underscores_action": "REJECT_REQUEST"},
    }
    if settings.server_header:
        hcm["server_name"] = settings.server_header
        hcm["server_header_transformation"] = "OVERWRITE"
    else:
        # Nothing added here; the upstream's own is removed by the response-header filter.
        hcm["server_header_transformation"] = "PASS_THROUGH"
    if settings.access_log is not None:
        hcm["access_log"] = [access_log(settings.access_log)]
    return hcm


def http_listener(settings: GatewaySettings) -> Listener:
    address, port = settings.listener_address, settings.listener_port
    hcm = http_connection_manager(settings)
    chain: dict[str, Any] = {
        "filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}]
    }
    if settings.tls is not None:
        chain["transport_socket"] = transport_socket()
        # First filter: the last to see a response, so local replies carry HSTS too.
        hcm["http_filters"].insert(0, hsts_filter())
    data: dict[str, Any] = {
        "name": LISTENER_NAME,
        "address": {"socket_address": {"address": address, "port_value": port}},
        "filter_chains": [chain],
    }
    return parse(Listener, data)
