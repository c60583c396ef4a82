"""Which of Gatehouse's checks decides a route, decided once, here.

Envoy can ask up to three things about a request: the Authorization service over Envoy's
HTTP protocol (the lean path: one call decides the token, the route's rules and its rate
limits), the same service over gRPC, and ratelimit_svc (Envoy's ratelimit filter). Which
of them a route meets follows from what the route asks for and what the gateway has:

- ``check``: who decides the route's credential, validation, waiting room and token swap:
  nobody (a public route asking for none of them), the **main** HTTP check (the first
  ext_authz filter, failing as ``extAuthz.failOpen`` says: a request that could not be
  checked must not pass as checked), or the **gRPC** check;
- ``limits``: who decides its rate limits: nobody (none, none enforced here, or a disabled
  route), the same main HTTP call, the **public-limits** filter (a second ext_authz filter
  for a public route's limits alone, failing as the RateLimitService would:
  ``rateLimit.failClosed``), or **ratelimit_svc**.

A route the plan sends to an HTTP call is named to it (``x-gatehouse-route``) and gets a
``RoutePolicy`` the service reads its rules from (``check_policy``); one whose limits go to
ratelimit_svc gets descriptors and a policy for it (``ratelimit``). Routes asking for what
no check here would decide are refused before they get a plan (each feature's
``refusals``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from control_plane.model.route import Route
from control_plane.translator.settings import GatewaySettings


class Decider(Enum):
    NONE = "none"
    MAIN_CHECK = "mainCheck"
    """The first ext_authz filter, over HTTP: token, rules, room, swap, and limits, in one call."""
    PUBLIC_LIMITS = "publicLimits"
    """The second ext_authz filter: a public route's limits alone, with ratelimit_svc's failure policy."""
    GRPC_CHECK = "grpcCheck"
    """The gRPC Authorization service: the route's requirements as context extensions."""
    RATELIMIT_SERVICE = "rateLimitService"
    """Envoy's ratelimit filter and ratelimit_svc."""


@dataclass(frozen=True, slots=True)
class CheckPlan:
    check: Decider
    limits: Decider

    @property
    def http_call(self) -> bool:
        """An HTTP check is asked about the route: it is named in ``x-gatehouse-route`` and
        has a ``RoutePolicy`` for that service."""
        return self.check is Decider.MAIN_CHECK or self.limits is Decider.PUBLIC_LIMITS


NOTHING = CheckPlan(Decider.NONE, Decider.NONE)


def check_plan(route: Route, settings: GatewaySettings) -> CheckPlan:
    spec = route.spec
    authz, rate_limit = settings.ext_authz, settings.rate_limit
    limited = bool(spec.rate_limits) and rate_limit is not None and spec.disabled is None
    if authz is not None and authz.decides_limits:
        # Over HTTP. A disabled route is still checked (its token, as over gRPC), with no limits.
        # A room or rules: the fail-closed main check, even on a public route (a room that
        # failed open under a crowd would admit the crowd). A disabled route validates nothing.
        gated = spec.waiting_room is not None or (spec.validate_ is not None and spec.disabled is None)
        if spec.auth.required or gated:
            return CheckPlan(Decider.MAIN_CHECK, Decider.MAIN_CHECK if limited else Decider.NONE)
        if limited and authz.public_route_limits and _header_keys_forwarded(route, authz.forward_headers):
            return CheckPlan(Decider.NONE, Decider.PUBLIC_LIMITS)
    check = Decider.GRPC_CHECK if authz is not None and spec.auth.required else Decider.NONE
    return CheckPlan(check, Decider.RATELIMIT_SERVICE if limited else Decider.NONE)


def _header_keys_forwarded(route: Route, forwarded: tuple[str, ...]) -> bool:
    """A ``header:<name>`` key the check would not see keeps a public route's limits on
    ratelimit_svc, which sees every header (an authenticated route is refused instead)."""
    names = {limit.key.removeprefix("header:").lower() for limit in route.spec.rate_limits if limit.key.startswith("header:")}
    return names <= set(forwarded)
