"""Authentication in Envoy: ask ext_authz on every route that requires it.

``ext_authz`` (to the ``gatehouse_ext_authz`` cluster) checks the token and, on OK, sets
``x-user-id``, ``x-user-role`` and ``x-scope`` from verified claims; client-sent copies
were removed before it (``identity_headers``). It receives only the headers it needs.
Per route, ext_authz is disabled for ``auth.required: false`` (no call is made). Two
protocols (``extAuthz.protocol``):

- ``grpc``: the route's requirements travel as ``context_extensions``; its rate limits
  are a second call, Envoy's ratelimit filter to the RateLimitService;
- ``http`` (the lean path): Envoy's HTTP ext_authz protocol. The route is named by
  ``x-gatehouse-route``, set per route (``route_identity``) after every client copy was
  removed; its requirements and its rate limits reach the service as a ``RoutePolicy``
  over xDS, and that one call decides both (the ratelimit filter is not called for the
  route). Identity headers go upstream through ``allowed_upstream_headers``; a denial's
  status, headers and body go to the client as the service wrote them; ``X-RateLimit-*``
  reach the client on success through ``allowed_client_headers_on_success``.
"""

from __future__ import annotations

from typing import Any

from control_plane.model.route import Route
from control_plane.translator.feature import HttpFeature
from control_plane.translator.identity_headers import IDENTITY_HEADERS, ROUTE_HEADER
from control_plane.translator.check_headers import FORWARDED_HEADERS, HTTP_FORWARDED_HEADERS
from control_plane.translator.check_plan import CheckPlan, Decider, check_plan
from control_plane.translator.upstream_token import UPSTREAM_TOKEN_HEADER
from control_plane.translator.service_clusters import grpc_service_cluster, http_service_cluster
from servicekit.durations import format_duration_ms
from servicekit.protos.gatehouse.policy.v1 import policy_pb2
from control_plane.translator.settings import ExtAuthzSettings as ExtAuthzSettings
from control_plane.translator.settings import GatewaySettings, RateLimitSettings
from control_plane.translator.validation import body_check_settings

EXT_AUTHZ_FILTER = "envoy.filters.http.ext_authz"
# The second ext_authz filter, for public routes' limits: off in the chain, on per route.
PUBLIC_LIMITS_FILTER = "gatehouse.public_route_limits"
EXT_AUTHZ_CLUSTER = "gatehouse_ext_authz"
EXT_AUTHZ_TYPE = "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz"
EXT_AUTHZ_PER_ROUTE_TYPE = "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute"
RATE_LIMIT_HEADERS = ("x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset")
# On success: the X-RateLimit-* headers, and a waiting room's spent-ticket cookie cleared.
CLIENT_HEADERS_ON_SUCCESS = (*RATE_LIMIT_HEADERS, "set-cookie")
CHECK_PATH_PREFIX = "/check"


def _exact(names: tuple[str, ...] | list[str]) -> dict[str, Any]:
    return {"patterns": [{"exact": name, "ignore_case": True} for name in names]}


def ext_authz_filter(settings: ExtAuthzSettings) -> dict[str, Any]:
    if settings.protocol == "http":
        return _http_filter(settings)
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
            # The call's latency in filter state, for the access log (latency_stamps).
            "emit_filter_state_stats": True,
        },
    }


def _http_filter(settings: ExtAuthzSettings) -> dict[str, Any]:
    forwarded = [*HTTP_FORWARDED_HEADERS, *(h for h in settings.forward_headers if h not in HTTP_FORWARDED_HEADERS)]
    return {
        "name": EXT_AUTHZ_FILTER,
        "typed_config": {
            "@type": EXT_AUTHZ_TYPE,
            "transport_api_version": "V3",
            "http_service": {
                "server_uri": {
                    "uri": f"http://{EXT_AUTHZ_CLUSTER}",
                    "cluster": EXT_AUTHZ_CLUSTER,
                    "timeout": format_duration_ms(settings.timeout_ms),
                },
                "path_prefix": CHECK_PATH_PREFIX,
                "authorization_response": {
                    # authorization: a swap route's own token for its upstream (upstream_token).
                    "allowed_upstream_headers": _exact((*IDENTITY_HEADERS, UPSTREAM_TOKEN_HEADER)),
                    "allowed_client_headers_on_success": _exact(CLIENT_HEADERS_ON_SUCCESS),
                },
            },
            "failure_mode_allow": settings.fail_open,
            "status_on_error": {"code": "ServiceUnavailable"},
            "allowed_headers": _exact(forwarded),
            "include_peer_certificate": False,
            # The call's latency in filter state, for the access log (latency_stamps).
            "emit_filter_state_stats": True,
        },
    }


def public_limits_filter(settings: ExtAuthzSettings, rate_limit: RateLimitSettings) -> dict[str, Any]:
    """The same HTTP check for public routes' limits, with the RateLimitService's deadline
    and failure policy (``rateLimit.failClosed``: false lets requests through, true answers
    500), so moving a public route's limits here changes no outcome when the service is
    down. It sends no identity upstream. Off in the chain; on for the routes it decides."""
    config = _http_filter(settings)["typed_config"]
    config["http_service"]["server_uri"]["timeout"] = format_duration_ms(rate_limit.timeout_ms)
    config["http_service"]["authorization_response"] = {"allowed_client_headers_on_success": _exact(CLIENT_HEADERS_ON_SUCCESS)}
    # No token is read here, so none is sent.
    config["allowed_headers"]["patterns"] = [p for p in config["allowed_headers"]["patterns"] if p["exact"] != "authorization"]
    config["failure_mode_allow"] = not rate_limit.fail_closed
    config["status_on_error"] = {"code": "InternalServerError"}
    return {"name": PUBLIC_LIMITS_FILTER, "disabled": True, "typed_config": config}


def ext_authz_cluster(settings: ExtAuthzSettings) -> dict[str, Any]:
    if settings.protocol == "http":
        return http_service_cluster(EXT_AUTHZ_CLUSTER, settings.addresses)
    return grpc_service_cluster(EXT_AUTHZ_CLUSTER, settings.addresses)


def requirements(route: Route, policy: policy_pb2.RoutePolicy) -> None:
    """The route's requirements in its policy: ``auth.public``, or what a token must carry."""
    auth = route.spec.auth
    if not auth.required:
        policy.auth.public = True
        return
    policy.auth.issuers.extend(auth.issuers or ())
    policy.auth.audiences.extend(auth.audiences)
    policy.auth.scopes.extend(auth.scopes)
    policy.auth.roles.extend(auth.roles)


def per_route(route: Route, settings: GatewaySettings | None = None) -> dict[str, Any] | None:
    """The route's ext_authz settings: off for public routes (unless they validate
    requests or have a waiting room, over HTTP), else (gRPC) its requirements; over HTTP
    nothing per route (the rules come over xDS) but, for a body rule, the body to send
    (``validation``)."""
    auth = route.spec.auth
    check = check_plan(route, settings).check if settings is not None else Decider.GRPC_CHECK
    if check is Decider.NONE or (settings is None and not auth.required):
        return {"@type": EXT_AUTHZ_PER_ROUTE_TYPE, "disabled": True}
    if check is Decider.MAIN_CHECK:
        # A public route with a waiting room or rules too: its policy says auth.public.
        body = body_check_settings(route)
        return {"@type": EXT_AUTHZ_PER_ROUTE_TYPE, "check_settings": body} if body else None
    extensions = {"route": route.id}
    if auth.issuers:
        extensions["issuers"] = " ".join(auth.issuers)
    if auth.audiences:
        extensions["audiences"] = " ".join(auth.audiences)
    if auth.scopes:
        extensions["scopes"] = " ".join(auth.scopes)
    if auth.roles:
        extensions["roles"] = " ".join(auth.roles)
    return {"@type": EXT_AUTHZ_PER_ROUTE_TYPE, "check_settings": {"context_extensions": extensions}}


REQUIRE_AUDIENCE = (
    "auth.audiences: the route reads tokens and names no audience, and this gateway requires one "
    "(extAuthz.requireAudience; Helm: extAuthz.requireAudience): without one, a token collected by any backend "
    "(another tenant's) replays here; list the audiences this route's tokens are issued for"
)


def refusals(route: Route, settings: GatewaySettings) -> list[str]:
    """A route that requires a credential on a gateway with no check to verify it: refused,
    never served open. With ``requireAudience``, one that reads tokens and names no audience."""
    auth = route.spec.auth
    if not auth.required:
        return []
    if settings.ext_authz is not None:
        return [REQUIRE_AUDIENCE] if settings.ext_authz.require_audience and auth.jwt and not auth.audiences else []
    credential = "an API key" if not auth.jwt else "a token or an API key" if auth.api_keys else "a token"
    return [
        f"auth: the route requires {credential}, and this gateway has no authorization check to verify it; "
        "configure extAuthz in the control plane (Helm: extAuthz.enabled=true with extAuthz.issuers), "
        "or set auth.required: false for a public route"
    ]


class ExtAuthz(HttpFeature):
    name = EXT_AUTHZ_FILTER

    def refusals(self, route: Route, settings: GatewaySettings) -> list[str]:
        return refusals(route, settings)

    def http_filter(self, settings: GatewaySettings) -> dict[str, Any] | None:
        return None if settings.ext_authz is None else ext_authz_filter(settings.ext_authz)

    def per_route(self, route: Route, settings: GatewaySettings) -> dict[str, Any] | None:
        return None if settings.ext_authz is None else per_route(route, settings)

    def clusters(self, settings: GatewaySettings) -> list[dict[str, Any]]:
        return [] if settings.ext_authz is None else [ext_authz_cluster(settings.ext_authz)]

    def check_policy(self, route: Route, settings: GatewaySettings, plan: CheckPlan, policy: policy_pb2.RoutePolicy) -> None:
        requirements(route, policy)

    def removed_upstream(self, route: Route, settings: GatewaySettings) -> list[str]:
        # The route id was for the check, not for the upstream.
        return [ROUTE_HEADER] if check_plan(route, settings).http_call else []


class PublicRouteLimits(HttpFeature):
    """Public routes' limits through the lean call (``check_plan``: ``PUBLIC_LIMITS``)."""

    name = PUBLIC_LIMITS_FILTER

    def http_filter(self, settings: GatewaySettings) -> dict[str, Any] | None:
        authz, rate_limit = settings.ext_authz, settings.rate_limit
        if authz is None or rate_limit is None or not (authz.decides_limits and authz.public_route_limits):
            return None
        return public_limits_filter(authz, rate_limit)

    def per_route(self, route: Route, settings: GatewaySettings) -> dict[str, Any] | None:
        if check_plan(route, settings).limits is not Decider.PUBLIC_LIMITS:
            return None
        # Any per-route config turns on a filter the chain has off; Envoy refuses an empty one.
        return {"@type": EXT_AUTHZ_PER_ROUTE_TYPE, "check_settings": {}}
