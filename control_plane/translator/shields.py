"""Per-route IP access lists (Envoy RBAC) and the local rate-limit shield (local_ratelimit).

Both filters sit in every listener's chain doing nothing (an RBAC without rules allows
all; a local_ratelimit without a token bucket limits nothing); a route that sets
``access`` or ``shield`` turns them on for itself with ``typed_per_filter_config``.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from control_plane.model.route import Route
from control_plane.model.access import Access
from control_plane.model.shield import Shield
from control_plane.translator.feature import HttpFeature
from control_plane.translator.settings import GatewaySettings

RBAC_FILTER = "envoy.filters.http.rbac"
RBAC_TYPE = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC"
RBAC_PER_ROUTE_TYPE = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBACPerRoute"
SHIELD_FILTER = "envoy.filters.http.local_ratelimit"
LOCAL_RATELIMIT_TYPE = "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit"
SHIELD_STAT_PREFIX = "route_shield"
ACCESS_POLICY = "route-access"


def rbac_filter() -> dict[str, Any]:
    """No rules: every request passes unless its route brings an RBACPerRoute."""
    return {"name": RBAC_FILTER, "typed_config": {"@type": RBAC_TYPE}}


def shield_filter() -> dict[str, Any]:
    """No token bucket: nothing is limited unless the route brings one."""
    return {
        "name": SHIELD_FILTER,
        "typed_config": {"@type": LOCAL_RATELIMIT_TYPE, "stat_prefix": SHIELD_STAT_PREFIX},
    }


def _cidr_range(cidr: str) -> dict[str, Any]:
    network = ipaddress.ip_network(cidr, strict=True)
    return {"address_prefix": str(network.network_address), "prefix_len": network.prefixlen}


def _any_of(cidrs: list[str]) -> dict[str, Any]:
    ids = [{"direct_remote_ip": _cidr_range(c)} for c in cidrs]
    return ids[0] if len(ids) == 1 else {"or_ids": {"ids": ids}}


def access_per_route(access: Access) -> dict[str, Any]:
    """One ALLOW policy on the direct peer address: in ``allow`` (if any) and not in ``deny``.

    ``direct_remote_ip`` is the TCP peer, never a client-supplied X-Forwarded-For.
    """
    principals: list[dict[str, Any]] = []
    if access.allow:
        principals.append(_any_of(access.allow))
    if access.deny:
        principals.append({"not_id": _any_of(access.deny)})
    principal = principals[0] if len(principals) == 1 else {"and_ids": {"ids": principals}}
    return {
        "@type": RBAC_PER_ROUTE_TYPE,
        "rbac": {
            "rules": {
                "action": "ALLOW",
                "policies": {ACCESS_POLICY: {"permissions": [{"any": True}], "principals": [principal]}},
            }
        },
    }


def _always(runtime_key: str) -> dict[str, Any]:
    return {"runtime_key": runtime_key, "default_value": {"numerator": 100, "denominator": "HUNDRED"}}


def shield_per_route(shield: Shield) -> dict[str, Any]:
    """A token bucket of ``burst`` tokens refilled with ``requestsPerSecond`` each second."""
    burst = shield.burst if shield.burst is not None else shield.requests_per_second
    return {
        "@type": LOCAL_RATELIMIT_TYPE,
        "stat_prefix": SHIELD_STAT_PREFIX,
        "token_bucket": {"max_tokens": burst, "tokens_per_fill": shield.requests_per_second, "fill_interval": "1s"},
        "filter_enabled": _always("route_shield_enabled"),
        "filter_enforced": _always("route_shield_enforced"),
    }


class AccessList(HttpFeature):
    name = RBAC_FILTER

    def http_filter(self, settings: GatewaySettings) -> dict[str, Any] | None:
        return rbac_filter()

    def per_route(self, route: Route, settings: GatewaySettings) -> dict[str, Any] | None:
        return None if route.spec.access is None else access_per_route(route.spec.access)


class RouteShield(HttpFeature):
    name = SHIELD_FILTER

    def http_filter(self, settings: GatewaySettings) -> dict[str, Any] | None:
        return shield_filter()

    def per_route(self, route: Route, settings: GatewaySettings) -> dict[str, Any] | None:
        return None if route.spec.shield is None else shield_per_route(route.spec.shield)
