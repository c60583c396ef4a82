"""The gateway's HTTP listener: one HTTP connection manager that takes its routes over RDS."""

from __future__ import annotations

from typing import Any

from control_plane.translator.access_log import access_log
from control_plane.translator.ext_authz import ext_authz_filter, identity_header_filter
from control_plane.translator.ratelimit import ratelimit_filter
from control_plane.translator.settings import GatewaySettings
from control_plane.translator.messages import Listener, parse
from control_plane.translator.names import LISTENER_NAME, ROUTE_CONFIG_NAME

HCM_TYPE = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
ROUTER_TYPE = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"


def http_filters(settings: GatewaySettings) -> list[dict[str, Any]]:
    """Identity headers are stripped first, always; then ext_authz (which sets them from the
    token), then the rate limit (which may key on them), if configured; then the router."""
    filters = [identity_header_filter()]
    if settings.ext_authz is not None:
        filters.append(ext_authz_filter(settings.ext_authz))
    if settings.rate_limit is not None:
        filters.append(ratelimit_filter(settings.rate_limit))
    filters.append({"name": "envoy.filters.http.router", "typed_config": {"@type": ROUTER_TYPE}})
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
        # A caller's x-request-id is kept for correlation; Envoy generates one when absent.
        "preserve_external_request_id": True,
        # x_user_id must not pass as a second spelling of x-user-id.
        "common_http_protocol_options": {"headers_with_underscores_action": "REJECT_REQUEST"},
    }
    if settings.access_log is not None:
        hcm["access_log"] = [access_log(settings.access_log)]
    return hcm


def http_listener(settings: GatewaySettings) -> Listener:
    address, port = settings.listener_address, settings.listener_port
    data: dict[str, Any] = {
        "name": LISTENER_NAME,
        "address": {"socket_address": {"address": address, "port_value": port}},
        "filter_chains": [
            {
                "filters": [
                    {
                        "name": "envoy.filters.network.http_connection_manager",
                        "typed_config": http_connection_manager(settings),
                    }
                ]
            }
        ],
    }
    return parse(Listener, data)
