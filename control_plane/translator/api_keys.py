"""API keys on a route (``auth.apiKeys``): what the HTTP check is told, what the upstream never sees.

The keys are decided in the lean HTTP check only (``ext_authz/api_keys.py``): a route with
``apiKeys`` under ``extAuthz.protocol: grpc`` (or with no ext_authz at all) is refused,
quarantined with a message that says so, rather than served without its keys. The key
header is forwarded to the check (``check_headers.HTTP_FORWARDED_HEADERS``) and removed
before the request goes upstream; ``x-consumer`` is an identity header
(``identity_headers``), so a client's copy never passes.
"""

from __future__ import annotations

from control_plane.cache.resource import Resource
from control_plane.model.route import Route
from control_plane.model.schema import Auth
from control_plane.translator.feature import HttpFeature
from control_plane.translator.check_headers import API_KEY_HEADER
from control_plane.translator.settings import GatewaySettings
from servicekit.protos.gatehouse.ratelimit.v1 import policy_pb2

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


def check_decided(route: Route, settings: GatewaySettings) -> None:
    """ValueError (the route is quarantined) when no HTTP check would read its keys."""
    if not route.spec.auth.api_keys:
        return
    authz = settings.ext_authz
    if authz is None:
        raise ValueError("auth.apiKeys: the gateway has no extAuthz; API keys are checked by ext_authz's HTTP check")
    if authz.protocol != "http":
        raise ValueError(
            f"auth.apiKeys: needs extAuthz.protocol: http (this gateway uses {authz.protocol}); "
            "API keys are checked by the HTTP check only"
        )


class ApiKeysFeature(HttpFeature):
    """Not a filter: refuses keys no check would read, keeps the key from the upstream."""

    name = FEATURE

    def route_resources(self, route: Route, settings: GatewaySettings) -> tuple[Resource, ...]:
        check_decided(route, settings)
        return ()

    def removed_upstream(self, route: Route, settings: GatewaySettings) -> list[str]:
        return [API_KEY_HEADER] if route.spec.auth.api_keys else []
