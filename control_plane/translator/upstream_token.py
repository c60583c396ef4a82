"""Token swap (``auth.upstreamToken``) in Envoy's config: the rule in the route's policy,
``authorization`` among the headers the HTTP check may set upstream, and the refusal of
a swap route the gateway could not honour.

Only the HTTP check can swap (it answers the upstream's ``authorization``, which Envoy's
``allowed_upstream_headers`` puts in place of the client's). Over gRPC, without
``extAuthz``, or with ``extAuthz.failOpen`` (a failed or timed-out check passes the
request on untouched), the client's own token would reach the upstream, so such a route
is refused with the reason, and every other route keeps serving.
"""

from __future__ import annotations

from control_plane.model.route import Route
from control_plane.translator.check_plan import CheckPlan
from control_plane.translator.feature import HttpFeature
from control_plane.translator.settings import GatewaySettings
from servicekit.protos.gatehouse.policy.v1 import policy_pb2

UPSTREAM_TOKEN_HEADER = "authorization"  # noqa: S105 - a header name
"""Set upstream by the HTTP check's OK answer on swap routes only; other routes' answers
never carry it, so their client's header passes as before."""


def add_upstream_token(policy: policy_pb2.RoutePolicy, route: Route) -> None:
    """Copy the route's swap rule into its ``RoutePolicy`` (field ``upstream_token``)."""
    rule = route.spec.auth.upstream_token
    if rule is None:
        return
    policy.upstream_token.audience = rule.audience
    if rule.exchange is not None:
        policy.upstream_token.exchange_url = rule.exchange.url


class UpstreamTokenCheck(HttpFeature):
    """No filter of its own: it refuses a swap route the gateway cannot honour."""

    name = "gatehouse.upstream_token"

    def check_policy(self, route: Route, settings: GatewaySettings, plan: CheckPlan, policy: policy_pb2.RoutePolicy) -> None:
        if route.spec.auth.required:
            add_upstream_token(policy, route)

    def refusals(self, route: Route, settings: GatewaySettings) -> list[str]:
        rule = route.spec.auth.upstream_token
        authz = settings.ext_authz
        if rule is None or authz is None:
            return []  # no check at all: ``ext_authz.refusals`` says so
        if authz.protocol != "http":
            return [
                f"auth.upstreamToken: needs extAuthz.protocol: http (the gateway has extAuthz.protocol: {authz.protocol}); "
                "without it the client's own token would reach the upstream"
            ]
        if authz.fail_open:
            return [
                "auth.upstreamToken: the gateway has extAuthz.failOpen: true, which lets a request through "
                "with the client's own token when the check fails or times out; swap routes need failOpen: false "
                "(Helm: extAuthz.failOpen=false)"
            ]
        needed = "tokenExchange" if rule.exchange is not None else "signedUpstreamTokens"
        if authz.features is not None and needed not in authz.features:
            what = (
                "no token exchange (ext_authz http.upstreamTokens; Helm: extAuthz.upstreamTokens.enabled=true)"
                if rule.exchange is not None
                else "no signing key (ext_authz http.upstreamTokens.keyFile; Helm: extAuthz.upstreamTokens.enabled=true "
                "with extAuthz.upstreamTokens.keySecret)"
            )
            return [f"auth.upstreamToken: the authorization check has {what}; listed as {needed} in extAuthz.features"]
        return []
