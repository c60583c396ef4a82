"""``auth.maxTokenAge``: a token issued longer ago than this is refused, in the HTTP check.

Nothing of its own in Envoy's chain: the bound travels in the route's policy
(``AuthRequirements.max_token_age_ms``) and the check's ``TokenAge`` step
(``ext_authz/check/token_age.py``) decides it after the credential. Only the HTTP check
reads it: over gRPC the route is refused, never served without its bound.
"""

from __future__ import annotations

from control_plane.model.route import Route
from control_plane.translator.check_plan import CheckPlan
from control_plane.translator.feature import HttpFeature
from control_plane.translator.settings import GatewaySettings
from servicekit.protos.gatehouse.policy.v1 import policy_pb2


class TokenAge(HttpFeature):
    name = "gatehouse.token_age"

    def check_policy(self, route: Route, settings: GatewaySettings, plan: CheckPlan, policy: policy_pb2.RoutePolicy) -> None:
        if route.spec.auth.max_token_age is not None:
            policy.auth.max_token_age_ms = route.spec.auth.max_token_age

    def refusals(self, route: Route, settings: GatewaySettings) -> list[str]:
        authz = settings.ext_authz
        if route.spec.auth.max_token_age is None or authz is None or authz.protocol == "http":
            return []  # no check at all: ext_authz's refusal says so
        return [
            f"auth.maxTokenAge: decided in the HTTP authorization check, and this gateway has extAuthz.protocol: "
            f"{authz.protocol} (Helm: extAuthz.protocol=http)"
        ]
