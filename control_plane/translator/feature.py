"""What a gateway feature contributes to the Envoy config, in one place per feature.

Each feature module (``ext_authz``, ``ratelimit``, ``shields``, ...) holds one class that
implements ``HttpFeature``; ``http_filters.HTTP_FEATURES`` lists them in filter-chain
order. The listener, the route entries and the pipeline loop over that list and never
name a feature, so on the translator's side a new feature is its class, in its feature's
module, and its line (with its import) in the list (as Envoy Gateway's
``internal/xds/translator/httpfilters.go`` registers its filters). Everything else a feature touches (its model, its policy field, its check step,
docs, tests) is listed in docs/architecture.md, "Adding a route feature".

A hook a feature does not need keeps the default below (contributes nothing), so a
feature class states only what it does. Every hook is a pure function of the route and
the gateway's settings; a feature that is not configured returns nothing from each.

Each feature also says what it needs from the gateway (``refusals``): a route asking for
protection this gateway cannot enforce is refused, never served with less than it asks
for (fail closed); ``unenforced`` names what a route is served without because the
operator chose availability over it.
"""

from __future__ import annotations

from typing import Any, Protocol

from control_plane.cache.resource import Resource
from control_plane.model.route import Route
from control_plane.translator.check_plan import CheckPlan
from control_plane.translator.settings import GatewaySettings
from servicekit.protos.gatehouse.policy.v1 import policy_pb2


class HttpFeature(Protocol):
    name: str
    """The HTTP filter's name: in the chain, and the key of its ``typed_per_filter_config``."""

    def http_filter(self, settings: GatewaySettings) -> dict[str, Any] | None:
        """The filter in the listener's chain; None: not in this listener's chain."""
        return None

    def connection_manager(self, settings: GatewaySettings) -> dict[str, Any]:
        """Fields this feature sets on the HTTP connection manager (``access_log``, ...)."""
        return {}

    def per_route(self, route: Route, settings: GatewaySettings) -> dict[str, Any] | None:
        """The route's ``typed_per_filter_config`` entry for this filter; None: none."""
        return None

    def route_action(self, route: Route, settings: GatewaySettings) -> dict[str, Any]:
        """Fields of the route's ``route`` action (not used by routes that answer directly)."""
        return {}

    def removed_upstream(self, route: Route, settings: GatewaySettings) -> list[str]:
        """Request headers the route removes before it forwards (headers this feature
        added for a filter, not for the upstream)."""
        return []

    def clusters(self, settings: GatewaySettings) -> list[dict[str, Any]]:
        """Static clusters of the services this feature calls (ext_authz, ratelimit, ...)."""
        return []

    def route_resources(self, route: Route, settings: GatewaySettings) -> tuple[Resource, ...]:
        """Resources of another xDS type that the route brings (its rate-limit policy)."""
        return ()

    def check_policy(self, route: Route, settings: GatewaySettings, plan: CheckPlan, policy: policy_pb2.RoutePolicy) -> None:
        """Write what the HTTP check needs of this feature into the route's policy
        (``check_policy``; only for routes an HTTP check is asked about, ``plan.http_call``)."""
        return None

    def refusals(self, route: Route, settings: GatewaySettings) -> list[str]:
        """Why this gateway cannot enforce what the route asks of this feature, each naming
        the route's field, the missing setting and the Helm value that provides it. Any
        refuses the route: it is not served (``Accepted=False``, reason ``Unenforceable``)."""
        return []

    def unenforced(self, route: Route, settings: GatewaySettings) -> list[str]:
        """What the route asks of this feature that is served without being enforced,
        because the operator chose so (the route's ``Enforced=False`` condition)."""
        return []
