"""API keys on a route (``auth.apiKeys``): what the HTTP check is told, what the upstream never sees.

The keys are decided in the lean HTTP check only (``ext_authz/check/api_keys.py``): a route with
``apiKeys`` under ``extAuthz.protocol: grpc`` (or with no ext_authz at all, or a check
without a key store) is refused with a message that says so, rather than served without its keys. The key
header is forwarded to the check (``check_headers.HTTP_FORWARDED_HEADERS``) and removed
before the request goes upstream; ``x-consumer`` is an identity header
(``identity_headers``), so a client's copy never passes.
"""

from __future__ import annotations

from control_plane.model.route import Route
from control_plane.model.auth import Auth
from control_plane.translator.check_plan import CheckPlan
from control_plane.translator.feature import HttpFeature
from control_plane.translator.check_headers import API_KEY_HEADER
from control_plane.translator.settings import GatewaySettings
from servicekit.protos.gatehouse.policy.v1 import policy_pb2

FEATURE = "gatehouse.api_keys"


def api_key_requirements(requirements: policy_pb2.AuthRequirements, auth: Auth) -> None:
    """The route's API-key fields of its ``AuthRequirements``."""
    if not auth.api_keys:
        return
    requirements.api_keys = True
    requirements.api_keys_only = not auth.jwt
    if auth.consumers is not None:
        requirements.allow_consumers.extend(auth.consumers.allow)
        requirements.deny_consumers.extend(auth.consumers.deny)


def refusals(route: Route, settings: GatewaySettings) -> list[str]:
    """Why no HTTP check here would read the route's keys (the route is then refused)."""
    if not route.spec.auth.api_keys:
        return []
    authz = settings.ext_authz
    if authz is None:
        return []  # ``ext_authz.refusals`` says the gateway has no check at all
    if authz.protocol != "http":
        return [
            f"auth.apiKeys: needs extAuthz.protocol: http (this gateway uses {authz.protocol}); "
            "API keys are checked by the HTTP check only (Helm: extAuthz.protocol=http)"
        ]
    if authz.features is not None and "apiKeys" not in authz.features:
        return [
            "auth.apiKeys: the authorization check has no key store (ext_authz revocation.redisUrl, listed in the "
            "control plane's extAuthz.features as apiKeys; Helm: extAuthz.revocation.enabled=true)"
        ]
    return []


class ApiKeysFeature(HttpFeature):
    """Not a filter: refuses keys no check would read, keeps the key from the upstream."""

    name = FEATURE

    def check_policy(self, route: Route, settings: GatewaySettings, plan: CheckPlan, policy: policy_pb2.RoutePolicy) -> None:
        if route.spec.auth.required:
            api_key_requirements(policy.auth, route.spec.auth)

    def refusals(self, route: Route, settings: GatewaySettings) -> list[str]:
        return refusals(route, settings)

    def removed_upstream(self, route: Route, settings: GatewaySettings) -> list[str]:
        return [API_KEY_HEADER] if route.spec.auth.api_keys else []
