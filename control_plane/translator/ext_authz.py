"""Authentication in Envoy: strip forged identity headers, then ask ext_authz.

Two HTTP filters run before the router on every request:

1. ``header_mutation`` removes client-sent ``x-user-id``, ``x-user-role`` and ``x-scope``
   (any case, every copy) on every route, public or not. Route-level header removal would
   run too late: ext_authz and other filters would already have seen the forged values.
2. ``ext_authz`` (gRPC, to the ``gatehouse_ext_authz`` cluster) checks the token and, on
   OK, sets those headers from verified claims. It receives only the headers it needs.

Per route, ext_authz is disabled for ``auth.required: false`` (no call is made), or given
the route's requirements as ``context_extensions``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servicekit.durations import format_duration_ms
from control_plane.model.route import Route
from control_plane.translator.service_clusters import grpc_service_cluster

IDENTITY_HEADERS = ("x-user-id", "x-user-role", "x-scope")
EXT_AUTHZ_FILTER = "envoy.filters.http.ext_authz"
HEADER_MUTATION_FILTER = "envoy.filters.http.header_mutation"
EXT_AUTHZ_CLUSTER = "gatehouse_ext_authz"
EXT_AUTHZ_TYPE = "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz"
EXT_AUTHZ_PER_ROUTE_TYPE = "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute"
HEADER_MUTATION_TYPE = "type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation"
# What the Authorization service reads; everything else stays out of the CheckRequest.
FORWARDED_HEADERS = ("authorization", "x-request-id")


@dataclass(frozen=True, slots=True)
class ExtAuthzSettings:
    addresses: tuple[tuple[str, int], ...]
    """(host, port) of each Authorization service instance."""
    timeout_ms: int = 250
    fail_open: bool = False
    """When the service cannot be reached: False answers 503 (the default), True lets the request through."""


def identity_header_filter() -> dict[str, Any]:
    return {
        "name": HEADER_MUTATION_FILTER,
        "typed_config": {
            "@type": HEADER_MUTATION_TYPE,
            "mutations": {"request_mutations": [{"remove": name} for name in IDENTITY_HEADERS]},
        },
    }


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
