"""A route's waiting room: decided in the lean HTTP check (docs/waiting-room.md).

Nothing of its own in Envoy's chain: the room travels in the route's ``RoutePolicy``
(``waiting_room``, written here by ``check_policy``); a public route with a room is checked
by the first ext_authz filter, fail-closed (``extAuthz.failOpen``), with ``auth.public`` in
its policy, not by the fail-open second one (a room that failed open under a crowd would
admit the crowd; ``check_plan``); the check's 429 with ``x-gatehouse-waiting-room``
becomes the client's 503 in ``local_replies``. A room that this gateway cannot decide (no HTTP check, or a check without a ticket
key) refuses the route: serving it without its room would let every request through.
"""

from __future__ import annotations

from control_plane.model.route import Route
from control_plane.model.waiting_room import WaitingRoom
from control_plane.translator.check_plan import CheckPlan
from control_plane.translator.feature import HttpFeature
from control_plane.translator.settings import GatewaySettings
from servicekit.protos.gatehouse.policy.v1 import policy_pb2
from servicekit.check_contract import TICKET_HEADER as TICKET_HEADER

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


def refusals(route: Route, settings: GatewaySettings) -> list[str]:
    """Why no check here would decide the route's room (the route is then refused)."""
    if route.spec.waiting_room is None or route.spec.disabled is not None:
        return []
    authz = settings.ext_authz
    if authz is None or authz.protocol != "http":
        have = "no extAuthz" if authz is None else f"extAuthz.protocol: {authz.protocol}"
        return [
            f"waitingRoom: the room is decided in the HTTP authorization check, and this gateway has {have}; "
            "set extAuthz.protocol: http (Helm: extAuthz.enabled=true, extAuthz.protocol=http)"
        ]
    if authz.features is not None and "waitingRoom" not in authz.features:
        return [
            "waitingRoom: the authorization check has no ticket key (ext_authz http.waitingRoom, listed in the "
            "control plane's extAuthz.features; Helm: rateLimit.enabled=true, which gives the sidecar the room's Redis)"
        ]
    return []


class WaitingRoomFeature(HttpFeature):
    name = FEATURE

    def check_policy(self, route: Route, settings: GatewaySettings, plan: CheckPlan, policy: policy_pb2.RoutePolicy) -> None:
        room = route.spec.waiting_room
        if room is not None and route.spec.disabled is None:
            policy.waiting_room.CopyFrom(waiting_room_policy(room))

    def refusals(self, route: Route, settings: GatewaySettings) -> list[str]:
        return refusals(route, settings)

    def removed_upstream(self, route: Route, settings: GatewaySettings) -> list[str]:
        return [TICKET_HEADER] if route.spec.waiting_room is not None else []
