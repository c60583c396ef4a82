"""Global rate limits: Envoy's ratelimit filter, per-route descriptors, and the policies
ratelimit_svc enforces (delivered over xDS as gatehouse.policy.v1.RoutePolicy).

Each of a route's ``rateLimits`` becomes one Envoy ``rate_limits`` entry whose descriptor
is ``[("limit", "<route id>#<index>"), (<key kind>, <value>)]``: the limit id names the
route and the policy; the second entry carries the key (the ``x-principal`` ext_authz set,
the client address, an API key or another header). A request without the key (no
``x-principal`` on a public route, say) sends no descriptor for that limit.

Envoy's own ``X-RateLimit-*`` generation stays off and no ``x-envoy-ratelimited`` header is
added: ratelimit_svc computes ``X-RateLimit-Limit/Remaining/Reset`` and ``Retry-After``
and returns them in ``response_headers_to_add``, so there is one source for the headers
(xds-protos lacks ``enable_retry_after_header`` anyway).
"""

from __future__ import annotations

from typing import Any

from servicekit.durations import format_duration_ms
from control_plane.cache.resource import Resource
from control_plane.cache.types import ResourceType
from control_plane.model.route import Route
from control_plane.model.rate_limits import RateLimit
from control_plane.translator.check_headers import API_KEY_HEADER, forwarded_to_check
from control_plane.translator.check_plan import CheckPlan, Decider, check_plan
from control_plane.translator.feature import HttpFeature
from control_plane.translator.service_clusters import grpc_service_cluster
from control_plane.translator.settings import GatewaySettings
from control_plane.translator.settings import RateLimitSettings as RateLimitSettings
from servicekit.protos.gatehouse.policy.v1 import policy_pb2
from servicekit.check_contract import PRINCIPAL_HEADER

RATELIMIT_FILTER = "envoy.filters.http.ratelimit"
RATELIMIT_TYPE = "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit"
RATELIMIT_CLUSTER = "gatehouse_ratelimit"
DOMAIN = "gatehouse"
LIMIT_ENTRY = "limit"
USER_HEADER = PRINCIPAL_HEADER
"""``user`` limits count per principal (the user id with its source), never per bare id."""


def ratelimit_filter(settings: RateLimitSettings) -> dict[str, Any]:
    return {
        "name": RATELIMIT_FILTER,
        "typed_config": {
            "@type": RATELIMIT_TYPE,
            "domain": DOMAIN,
            "timeout": format_duration_ms(settings.timeout_ms),
            "failure_mode_deny": settings.fail_closed,
            "rate_limit_service": {
                "grpc_service": {"envoy_grpc": {"cluster_name": RATELIMIT_CLUSTER}},
                "transport_api_version": "V3",
            },
            "enable_x_ratelimit_headers": "OFF",
            "disable_x_envoy_ratelimited_header": True,
        },
    }


def ratelimit_cluster(settings: RateLimitSettings) -> dict[str, Any]:
    return grpc_service_cluster(RATELIMIT_CLUSTER, settings.addresses)


def limit_id(route: Route, index: int) -> str:
    return f"{route.id}#{index}"


def _key_action(key: str) -> dict[str, Any]:
    if key == "ip":
        return {"remote_address": {}}
    if key == "user":
        return {"request_headers": {"header_name": USER_HEADER, "descriptor_key": "user"}}
    if key == "apiKey":
        return {"request_headers": {"header_name": API_KEY_HEADER, "descriptor_key": "apiKey"}}
    header = key.removeprefix("header:")
    return {"request_headers": {"header_name": header, "descriptor_key": key}}


def route_rate_limits(route: Route) -> list[dict[str, Any]]:
    """The route action's ``rate_limits``: one descriptor per limit; all must pass."""
    return [
        {"actions": [{"generic_key": {"descriptor_key": LIMIT_ENTRY, "descriptor_value": limit_id(route, index)}}, _key_action(limit.key)]}
        for index, limit in enumerate(route.spec.rate_limits)
    ]


def _limit(route: Route, index: int, limit: RateLimit) -> policy_pb2.Limit:
    message = policy_pb2.Limit(
        id=limit_id(route, index),
        key=limit.key,
        algorithm=limit.algorithm,
        shadow=limit.shadow,
        mode=limit.mode,
        on_store_failure=limit.on_store_failure,
    )
    if limit.algorithm == "tokenBucket":
        assert limit.capacity is not None and limit.refill is not None
        message.limit = limit.capacity
        message.refill_tokens, message.window_ms = limit.refill
    else:
        assert limit.limit is not None and limit.window is not None
        message.limit = limit.limit
        message.window_ms = limit.window
    return message


def route_policy(route: Route) -> policy_pb2.RoutePolicy:
    return policy_pb2.RoutePolicy(
        route=route.id, limits=[_limit(route, index, limit) for index, limit in enumerate(route.spec.rate_limits)]
    )


def _without_limiter(route: Route, settings: GatewaySettings) -> bool:
    return bool(route.spec.rate_limits) and route.spec.disabled is None and settings.rate_limit is None


def _unseen_header_keys(route: Route, settings: GatewaySettings) -> list[str]:
    """A ``header:<name>`` key on a route whose limits the main check decides, for a header
    Envoy never sends it: the limit could never count."""
    authz = settings.ext_authz
    if authz is None or check_plan(route, settings).limits is not Decider.MAIN_CHECK:
        return []
    forwarded = forwarded_to_check(authz)
    unseen = []
    for index, limit in enumerate(route.spec.rate_limits):
        header = limit.key.removeprefix("header:")
        if limit.key.startswith("header:") and header.lower() not in forwarded:
            unseen.append(
                f"rateLimits[{index}].key: {limit.key}: the authorization check would never see this header; "
                f"add {header} to extAuthz.forwardHeaders"
            )
    return unseen


class GlobalRateLimit(HttpFeature):
    name = RATELIMIT_FILTER

    def check_policy(self, route: Route, settings: GatewaySettings, plan: CheckPlan, policy: policy_pb2.RoutePolicy) -> None:
        if plan.limits in (Decider.MAIN_CHECK, Decider.PUBLIC_LIMITS):
            policy.limits.extend(_limit(route, index, limit) for index, limit in enumerate(route.spec.rate_limits))

    def refusals(self, route: Route, settings: GatewaySettings) -> list[str]:
        if not _without_limiter(route, settings) or settings.serve_unlimited:
            return _unseen_header_keys(route, settings)
        return [
            "rateLimits: this gateway has no rate-limit service to count them; configure rateLimit in the control "
            "plane (Helm: rateLimit.enabled=true with a Redis), or set rateLimitsWithoutLimiter: serveUnlimited "
            "to serve such routes without their limits"
        ]

    def unenforced(self, route: Route, settings: GatewaySettings) -> list[str]:
        if not _without_limiter(route, settings) or not settings.serve_unlimited:
            return []
        return ["rateLimits: not enforced: this gateway has no rate-limit service (rateLimitsWithoutLimiter: serveUnlimited)"]

    def http_filter(self, settings: GatewaySettings) -> dict[str, Any] | None:
        return None if settings.rate_limit is None else ratelimit_filter(settings.rate_limit)

    def route_action(self, route: Route, settings: GatewaySettings) -> dict[str, Any]:
        if check_plan(route, settings).limits is not Decider.RATELIMIT_SERVICE:
            return {}
        return {"rate_limits": route_rate_limits(route)}

    def clusters(self, settings: GatewaySettings) -> list[dict[str, Any]]:
        return [] if settings.rate_limit is None else [ratelimit_cluster(settings.rate_limit)]

    def route_resources(self, route: Route, settings: GatewaySettings) -> tuple[Resource, ...]:
        """The route's policy for ratelimit_svc, when its limits are decided there."""
        if check_plan(route, settings).limits is not Decider.RATELIMIT_SERVICE:
            return ()
        return (Resource.from_message(ResourceType.POLICY, route.id, route_policy(route)),)
