"""The waiting room in the HTTP check: admit, queue with a ticket, or refuse
(docs/waiting-room.md).

A request that passed the token and the rate limits meets its route's room last (a
request that would be refused anyway never takes a place). One script step in Redis
decides (``limiter.waiting_room_store``); this module reads and writes tickets and turns
the step into the answer Envoy relays:

- admitted: the check's 200 (a ticket cookie is cleared: each ticket admits one request);
- wait: 429 with ``x-gatehouse-waiting-room: waiting``, ``Retry-After``, the ticket
  (``Set-Cookie`` and ``x-gatehouse-ticket``) and ``{position, estimatedWaitSeconds,
  retryAfter}``. Envoy treats any 5xx from this service as the service failing, so the
  503 the client sees is made by Envoy's local-reply mapper from the marker header
  (``control_plane/translator/local_replies.py``); ``full`` and ``unavailable`` likewise;
- a ticket not made by our key for this route, or one already admitted: 403.

Redis unreachable: the room's ``onStoreFailure`` (``local``: a token bucket of
``admitPerSecond ÷ expected instances`` in this process, no queue; ``open``; ``closed``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass

import structlog

from ext_authz import metrics
from ext_authz.check.steps import Call, CheckParts
from ext_authz.check.tickets import TicketSigner
from limiter.errors import StoreError
from limiter.local import LocalStore
from limiter.model import LimitSpec
from limiter.waiting_room_store import ADMITTED, FULL, USED, Room, WaitingRoomStore
from servicekit.http1_server import response
from servicekit.protos.gatehouse.policy.v1 import policy_pb2
from servicekit.check_contract import TICKET_HEADER as TICKET_HEADER
from servicekit.check_contract import WAITING_ROOM_HEADER as MARKER_HEADER

log = structlog.get_logger(component="ext_authz")

COOKIE_PREFIX = "gatehouse-wr-"
MARKED_STATUS = 429
FULL_RETRY_CAP_S = 60
POLICIES = ("local", "open", "closed")


@dataclass(frozen=True, slots=True)
class RoomPolicy:
    room: Room
    on_store_failure: str
    cookie: str
    """The ticket's cookie name, one per route (a ticket for one route is no use on another)."""
    local: LimitSpec
    """``onStoreFailure: local``: admitPerSecond as a token bucket, shared by the instances."""


def cookie_name(route: str) -> str:
    return COOKIE_PREFIX + hashlib.sha256(route.encode()).hexdigest()[:12]


def room_policy(route: str, message: policy_pb2.WaitingRoom) -> RoomPolicy:
    """The delivered room; ValueError naming the route and field if unusable."""
    if message.admit_per_second < 1:
        raise ValueError(f"route {route}: waitingRoom.admitPerSecond must be at least 1")
    if message.max_waiting < 1:
        raise ValueError(f"route {route}: waitingRoom.maxWaiting must be at least 1")
    if message.ticket_ttl_ms < 1000:
        raise ValueError(f"route {route}: waitingRoom.ticketTtl must be at least 1s")
    if message.on_store_failure not in POLICIES:
        raise ValueError(f"route {route}: waitingRoom.onStoreFailure must be one of {', '.join(POLICIES)}")
    rate = int(message.admit_per_second)
    return RoomPolicy(
        Room(route, rate, int(message.max_waiting), int(message.ticket_ttl_ms)),
        message.on_store_failure,
        cookie_name(route),
        LimitSpec(id=f"{route}#waitingRoom", algorithm="tokenBucket", limit=rate, window_ms=1000, refill_tokens=rate),
    )


def _presented(headers: Mapping[str, str], cookie: str) -> str | None:
    """The ticket the client sent: the header, else the route's cookie."""
    ticket = headers.get(TICKET_HEADER)
    if ticket:
        return ticket.strip()
    jar = headers.get("cookie")
    if not jar or cookie not in jar:
        return None
    for part in jar.split(";"):
        name, _, value = part.strip().partition("=")
        if name == cookie:
            return value.strip().strip('"')
    return None


def _body(code: str, message: str, request_id: str, **extra: object) -> bytes:
    return json.dumps({**extra, "error": {"code": code, "message": message, "request_id": request_id}}, separators=(",", ":")).encode()


_JSON = [("content-type", "application/json"), ("cache-control", "no-store")]


@dataclass(frozen=True, slots=True)
class Verdict:
    admitted: bool
    data: bytes
    """Admitted: header lines to add to the check's 200; else the whole answer."""


_ADMIT = Verdict(True, b"")


class WaitingRoomGate:
    def __init__(self, store: WaitingRoomStore, signer: TicketSigner, local: LocalStore) -> None:
        self._store = store
        self._signer = signer
        self._local = local
        self._wait = metrics.DECISIONS.labels("deny", "waiting_room")
        self._full = metrics.DECISIONS.labels("deny", "waiting_room_full")
        self._fallback_logged: set[str] = set()

    async def check(self, policy: RoomPolicy, headers: Mapping[str, str], request_id: str) -> Verdict:
        route = policy.room.route
        ticket = _presented(headers, policy.cookie)
        if ticket is not None:
            ticket_id = self._signer.verify(route, ticket)
            if ticket_id is None:
                return self._refused(policy, "waiting_room_ticket_invalid", "This waiting-room ticket is not valid for this route.", request_id)
        else:
            ticket_id = self._signer.new_id()
        try:
            step = await self._store.step(policy.room, ticket_id, returning=ticket is not None)
        except StoreError as exc:
            return self._fallback(policy, exc, request_id)
        if route in self._fallback_logged:
            self._fallback_logged.discard(route)
            log.info("waiting_room_fallback_ended", route=route[:200])
        if step.code == ADMITTED:
            if ticket is not None and TICKET_HEADER not in headers:
                return Verdict(True, f"set-cookie: {policy.cookie}=; Max-Age=0; Path=/; HttpOnly; SameSite=Lax\r\n".encode())
            return _ADMIT
        if step.code == USED:
            return self._refused(policy, "waiting_room_ticket_used", "This waiting-room ticket was already used.", request_id)
        if step.code == FULL:
            self._full.inc()
            retry = max(1, min(FULL_RETRY_CAP_S, math.ceil(policy.room.max_waiting / policy.room.admit_per_second)))
            body = _body("waiting_room_full", "The waiting room is full; retry later.", request_id, retryAfter=retry)
            return Verdict(False, response(MARKED_STATUS, [*_JSON, (MARKER_HEADER, "full"), ("retry-after", str(retry))], body))
        return self._waiting(policy, self._signer.sign(route, ticket_id), step.position, step.retry_after, request_id)

    def _waiting(self, policy: RoomPolicy, ticket: str | None, position: int | None, retry: int, request_id: str) -> Verdict:
        """``retry``: the store's (it holds the ticket's turn that long plus a grace)."""
        self._wait.inc()
        rate = policy.room.admit_per_second
        ahead = position if position is not None else rate
        body = _body(
            "waiting_room", "You are in the waiting room; retry with your ticket.", request_id,
            position=position, estimatedWaitSeconds=round(ahead / rate, 2), retryAfter=retry,
        )
        lines = [*_JSON, (MARKER_HEADER, "waiting"), ("retry-after", str(retry))]
        if ticket is not None:
            ttl = policy.room.ticket_ttl_ms // 1000
            lines += [(TICKET_HEADER, ticket), ("set-cookie", f"{policy.cookie}={ticket}; Max-Age={ttl}; Path=/; HttpOnly; SameSite=Lax")]
        return Verdict(False, response(MARKED_STATUS, lines, body))

    def _refused(self, policy: RoomPolicy, code: str, message: str, request_id: str) -> Verdict:
        metrics.DECISIONS.labels("deny", code).inc()
        clear = ("set-cookie", f"{policy.cookie}=; Max-Age=0; Path=/; HttpOnly; SameSite=Lax")
        return Verdict(False, response(403, [*_JSON, clear], _body(code, message, request_id)))

    def _fallback(self, policy: RoomPolicy, exc: StoreError, request_id: str) -> Verdict:
        route = policy.room.route
        if route not in self._fallback_logged and len(self._fallback_logged) < 1000:
            self._fallback_logged.add(route)
            log.warning("waiting_room_fallback", route=route[:200], policy=policy.on_store_failure, reason=exc.reason)
        metrics.DECISIONS.labels("fallback", f"waiting_room_{policy.on_store_failure}").inc()
        if policy.on_store_failure == "open":
            return _ADMIT
        if policy.on_store_failure == "local":
            if self._local.hit_now(policy.local, "waiting-room").allowed:
                return _ADMIT
            return self._waiting(policy, None, None, 1, request_id)
        body = _body("waiting_room_unavailable", "The waiting room cannot decide right now; retry later.", request_id, retryAfter=1)
        return Verdict(False, response(MARKED_STATUS, [*_JSON, (MARKER_HEADER, "unavailable"), ("retry-after", "1")], body))


class WaitingRoomStep:
    """A route's waiting room, once everything else passed: a request it does not admit
    (a ticket, a wait, a full room) gives back its limits' hits."""

    gives_back = True

    def __init__(self, room: RoomPolicy, gate: WaitingRoomGate) -> None:
        self._room = room
        self._gate = gate

    @classmethod
    def for_route(cls, policy: policy_pb2.RoutePolicy, parts: CheckParts) -> WaitingRoomStep | None:
        if not policy.HasField("waiting_room"):
            return None
        gate = parts.need(WaitingRoomGate, "has a waiting room, and ext_authz has no http.waitingRoom (and http.rateLimit)")
        return cls(room_policy(policy.route, policy.waiting_room), gate)

    async def run(self, call: Call) -> bytes | None:
        verdict = await self._gate.check(self._room, call.request.headers, call.request_id)
        if not verdict.admitted:
            return verdict.data
        call.extra += verdict.data
        return None
