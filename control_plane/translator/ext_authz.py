"""Authentication in Envoy: ask ext_authz on every route that requires it.

``ext_authz`` (gRPC, to the ``gatehouse_ext_authz`` cluster) checks the token and, on OK,
sets ``x-user-id``, ``x-user-role`` and ``x-scope`` from verified claims; client-sent copies
were removed before it (``identity_headers``). It receives only the headers it needs.

Per route, ext_authz is disabled for ``auth.required: false`` (no call is made), or given
the route's requirements as ``context_extensions``.
"""

from __future__ import annotations

from typing import Any

from servicekit.durations import format_duration_ms
from control_plane.model.route import Route
from control_plane.translator.feature import HttpFeature
from control_plane.translator.service_clusters import grpc_service_cluster
from control_plane.translator.settings import ExtAuthzSettings as ExtAuthzSettings
from control_plane.translator.settings import GatewaySettings

EXT_AUTHZ_FILTER = "envoy.filters.http.ext_authz"
EXT_AUTHZ_CLUSTER = "gatehouse_ext_authz"
EXT_AUTHZ_TYPE = "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz"
EXT_AUTHZ_PER_ROUTE_TYPE = "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute"
# What the Authorization service reads; everything else stays out of the CheckRequest.
FORWARDED_HEADERS = ("authorization", "x-request-id")


def ext_authz_filter(settings: ExtAuthzSettings) -> dict[str, Any]:
    return {
        "name": EXT_AUTHZ_FILTER,
        "typed_config": {
            "@type": EXT_AUTHZ_TYPE,
            "transport_api_version": "V3",
            "grpc_service": {
                "envoy_grpc": {"cluster_name": EXT_AUTHZ_CLUSTER},
                "timeout": format_duration_ms(settings.timeout_ms),
            },
            "failure_mode_allow": settings.fail_open,
            "status_on_error": {"code": "ServiceUnavailable"},
            "allowed_headers": {"patterns": [{"exact": name, "ignore_case": True} for name in FORWARDED_HEADERS]},
            "include_peer_certificate": False,
        },
    }


def ext_authz_cluster(settings: ExtAuthzSettings) -> dict[str, Any]:
    return grpc_service_cluster(EXT_AUTHZ_CLUSTER, settings.addresses)


def per_route(route: Route) -> dict[str, Any]:
    """The route's ext_authz settings: off for public routes, else its requirements."""
    auth = route.spec.auth
    if not auth.required:
        return {"@type": EXT_AUTHZ_PER_ROUTE_TYPE, "disabled": True}
    extensions = {"route": route.id}
    if auth.audiences:
        extensions["audiences"] = " ".join(auth.audiences)
    if auth.scopes:
        extensions["scopes"] = " ".join(auth.scopes)
    if auth.roles:
        extensions["roles"] = " ".join(auth.roles)
    return {"@type": EXT_AUTHZ_PER_ROUTE_TYPE, "check_settings": {"context_extensions": extensions}}


class ExtAuthz(HttpFeature):
    name = EXT_AUTHZ_FILTER

    def http_filter(self, settings: GatewaySettings) -> dict[str, Any] | None:
        return None if settings.ext_authz is None else ext_authz_filter(settings.ext_authz)

    def per_route(self, route: Route, settings: GatewaySettings) -> dict[str, Any] | None:
        return None if settings.ext_authz is None else per_route(route)

    def clusters(self, settings: GatewaySettings) -> list[dict[str, Any]]:
        return [] if settings.ext_authz is None else [ext_authz_cluster(settings.ext_authz)]
