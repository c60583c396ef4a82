"""The route's name for the HTTP authorization check: ``x-gatehouse-route: <namespace/name>``.

Set per route by a second ``header_mutation`` filter, after the identity filter removed
every client copy (so a client cannot choose whose rules apply) and before ext_authz
forwards it. Only routes whose check goes over HTTP get it; the route entry removes it
again before the request goes upstream (``ext_authz.removed_upstream``).
"""

from __future__ import annotations

from typing import Any

from control_plane.model.route import Route
from control_plane.translator.feature import HttpFeature
from control_plane.translator.identity_headers import ROUTE_HEADER
from control_plane.translator.messages import HEADER_MUTATION_TYPE
from control_plane.translator.check_plan import check_plan
from control_plane.translator.settings import GatewaySettings

ROUTE_IDENTITY_FILTER = "gatehouse.route_identity"
HEADER_MUTATION_PER_ROUTE_TYPE = (
    "type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutationPerRoute"
)


class RouteIdentity(HttpFeature):
    name = ROUTE_IDENTITY_FILTER

    def http_filter(self, settings: GatewaySettings) -> dict[str, Any] | None:
        if settings.ext_authz is None or settings.ext_authz.protocol != "http":
            return None
        return {"name": ROUTE_IDENTITY_FILTER, "typed_config": {"@type": HEADER_MUTATION_TYPE, "mutations": {}}}

    def per_route(self, route: Route, settings: GatewaySettings) -> dict[str, Any] | None:
        if not check_plan(route, settings).http_call:
            return None
        header = {"key": ROUTE_HEADER, "value": route.id}
        mutation = {"append": {"header": header, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}}
        return {"@type": HEADER_MUTATION_PER_ROUTE_TYPE, "mutations": {"request_mutations": [mutation]}}
