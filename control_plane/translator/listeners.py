"""The gateway's HTTP listener: one HTTP connection manager that takes its routes over RDS.

Its HTTP filters, and the connection-manager fields a feature owns, come from the features
in ``http_filters.HTTP_FEATURES``, in that order; what every listener has is here.
"""

from __future__ import annotations

from typing import Any

from control_plane.translator.http_filters import HTTP_FEATURES
from control_plane.translator.local_replies import local_reply_config
from control_plane.translator.messages import Listener, parse
from control_plane.translator.names import LISTENER_NAME, ROUTE_CONFIG_NAME
from control_plane.translator.settings import GatewaySettings
from control_plane.translator.tls import transport_socket

HCM_TYPE = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"


def http_filters(settings: GatewaySettings) -> list[dict[str, Any]]:
    """The filter chain: each configured feature's filter, in ``HTTP_FEATURES`` order."""
    return [f for feature in HTTP_FEATURES if (f := feature.http_filter(settings)) is not None]


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
        # What reaches the upstream (docs/routes.md): the path Envoy matched, checked and
        # forwards is one and the same, each setting on purpose.
        # RFC 3986 normalization before matching, so /a/../admin cannot dodge a route; it
        # also decodes escaped unreserved characters (%41 is A) and upper-cases other escapes.
        # Only the path: the query is never normalized.
        "normalize_path": True,
        # //admin is /admin: an upstream that merges slashes must not see another route's path.
        "merge_slashes": True,
        # %2F and %5C in the path: 400. The upstream may decode them into separators the
        # route did not match; unescaping (or redirecting to the unescaped path) would change
        # the path's meaning behind the client's back, so the client is told instead.
        "path_with_escaped_slashes_action": "REJECT_REQUEST",
        "strip_any_host_port": True,
        # `api.example.com.` is api.example.com (RFC 1034's absolute name): without this it
        # matched no named host and fell to a host-less route, past the host's own auth.
        "strip_trailing_host_dot": True,
        # A caller's x-request-id is kept for correlation; Envoy generates one when absent,
        # sends it upstream, and returns it on every response (local replies too).
        "preserve_external_request_id": True,
        "always_set_request_id_in_response": True,
        # The gateway's own errors (404, 413, 431, 429, 503, 504) as one JSON body.
        "local_reply_config": local_reply_config(),
        # x_user_id must not pass as a second spelling of x-user-id.
        "common_http_protocol_options": {"headers_with_underscores_action": "REJECT_REQUEST"},
    }
    for feature in HTTP_FEATURES:
        hcm.update(feature.connection_manager(settings))
    return hcm


def http_listener(settings: GatewaySettings) -> Listener:
    address, port = settings.listener_address, settings.listener_port
    chain: dict[str, Any] = {
        "filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": http_connection_manager(settings)}]
    }
    if settings.tls is not None:
        chain["transport_socket"] = transport_socket()
    data: dict[str, Any] = {
        "name": LISTENER_NAME,
        "address": {"socket_address": {"address": address, "port_value": port}},
        "filter_chains": [chain],
    }
    return parse(Listener, data)
