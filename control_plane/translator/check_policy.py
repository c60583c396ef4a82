"""A route's ``RoutePolicy`` for the HTTP check: built here, once, from every feature's part.

The plan (``check_plan``) says whether an HTTP check is asked about the route. If so, each
feature writes what the check needs of it into the one message (``HttpFeature.check_policy``):
ext_authz the requirements (or ``auth.public``), the rate limits their limits when that
call decides them, API keys, token swap, validation, the waiting room and the token-age
bound their rules. A new feature the check decides is its model, its policy field, its
translator module (this hook and its ``refusals``), its step in the check (a module in
``ext_authz/check/`` and its place in ``route_table.STEP_ORDER``) and its tests: the whole
list, by file, is docs/architecture.md, "Adding a route feature".
"""

from __future__ import annotations

from collections.abc import Sequence

from control_plane.cache.resource import Resource
from control_plane.cache.types import ResourceType
from control_plane.model.route import Route
from control_plane.translator.check_plan import check_plan
from control_plane.translator.feature import HttpFeature
from control_plane.translator.settings import GatewaySettings
from servicekit.protos.gatehouse.policy.v1 import policy_pb2


def check_policy(route: Route, settings: GatewaySettings, features: Sequence[HttpFeature]) -> Resource | None:
    """The route's policy resource, or None when no HTTP check is asked about it."""
    plan = check_plan(route, settings)
    if not plan.http_call:
        return None
    policy = policy_pb2.RoutePolicy(route=route.id)
    policy.auth.SetInParent()  # present: this route's checks come to the HTTP service
    for feature in features:
        feature.check_policy(route, settings, plan, policy)
    return Resource.from_message(ResourceType.POLICY, route.id, policy)
