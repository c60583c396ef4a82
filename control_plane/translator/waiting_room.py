"""A route's waiting room: decided in the lean HTTP check (docs/waiting-room.md).

Nothing of its own in Envoy's chain: the room travels in the route's ``RoutePolicy``
(``waiting_room``, built here, added by ``ext_authz.http_route_policy``); a public route
with a room is checked by the first ext_authz filter, fail-closed (``extAuthz.failOpen``),
with ``auth.public`` in its policy, not by the fail-open second one (a room that failed
open under a crowd would admit the crowd; ``ratelimit.decided_by_authz``); the check's 429 with ``x-gatehouse-waiting-room`` becomes the client's 503 in
``local_replies``. A room that this gateway cannot decide (no HTTP check) quarantines the
route: serving it without its room would let every request through.
"""

from __future__ import annotations

from control_plane.cache.resource import Resource
from control_plane.model.route import Route
from control_plane.model.waiting_room import WaitingRoom
from control_plane.translator.feature import HttpFeature
from control_plane.translator.settings import GatewaySettings
from servicekit.protos.gatehouse.ratelimit.v1 import policy_pb2

TICKET_HEADER = "x-gatehouse-ticket"
TICKET_CARRIERS = (TICKET_HEADER, "cookie")
"""What the check reads a ticket from: its header (clients without cookies) or a cookie."""
FEATURE = "gatehouse.waiting_room"


def waiting_room_policy(room: WaitingRoom) -> policy_pb2.WaitingRoom:
    return policy_pb2.WaitingRoom(
        admit_per_second=room.admit_per_second,
        max_waiting=room.max_waiting,
        ticket_ttl_ms=room.ticket_ttl,
        on_store_failure=room.on_store_failure,
    )


def check_enforced(route: Route, settings: GatewaySettings) -> None:
    """ValueError (the route is quarantined) if no check here would decide its room."""
    if route.spec.waiting_room is None or route.spec.disabled is not None:
        return
    authz = settings.ext_authz
    if authz is None or authz.protocol != "http":
        raise ValueError("waitingRoom: needs extAuthz.protocol: http (the room is decided in the HTTP check)")


class WaitingRoomFeature(HttpFeature):
    name = FEATURE

    def route_resources(self, route: Route, settings: GatewaySettings) -> tuple[Resource, ...]:
        check_enforced(route, settings)
        return ()

    def removed_upstream(self, route: Route, settings: GatewaySettings) -> list[str]:
        return [TICKET_HEADER] if route.spec.waiting_room is not None else []
