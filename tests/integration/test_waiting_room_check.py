"""The waiting room in the HTTP check, in process, against a real redis-server.

The handler ``Http1Server`` calls, a real Limiter's Redis, the real Lua step: a crowd
beyond ``admitPerSecond`` gets tickets with positions in arrival order, the room refuses
past ``maxWaiting``, a ticket is bound to its route and admits one request, and a Redis
outage follows ``onStoreFailure``. Through Envoy (the 503 the client sees, two instances):
test_waiting_room_envoy.py.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator

import pytest

from ext_authz.denial_audit import DenialAudit
from ext_authz.check.http_check import HttpCheck
from ext_authz.check.route_table import RouteSubscription, RouteTable
from ext_authz.check.steps import CheckParts
from servicekit.check_contract import ROUTE_HEADER
from ext_authz.check.tickets import TicketSigner
from ext_authz.check.waiting_room import MARKER_HEADER, TICKET_HEADER, WaitingRoomGate, cookie_name
from limiter import Limiter
from limiter.config import Policies
from limiter.policies import PartlyApplied
from limiter.waiting_room_store import TURN_GRACE_MS, WaitingRoomStore
from servicekit.audit import MemoryAuditSink
from servicekit.http1_server import Request
from servicekit.protos.gatehouse.policy.v1 import policy_pb2
from tests.harness.redis import RedisServer
from tests.integration.test_http_check_limits import issuer_authorizer, parse

pytestmark = pytest.mark.redis

ROUTE = "shop/launch"
KEY = b"k" * 32


def room_policy(
    route: str = ROUTE, *, rate: int = 5, max_waiting: int = 100, on_failure: str = "local", ttl_ms: int = 30_000
) -> policy_pb2.RoutePolicy:
    policy = policy_pb2.RoutePolicy(route=route)
    policy.auth.public = True
    policy.waiting_room.CopyFrom(
        policy_pb2.WaitingRoom(admit_per_second=rate, max_waiting=max_waiting, ticket_ttl_ms=ttl_ms, on_store_failure=on_failure)
    )
    return policy


class Room:
    def __init__(self, check: HttpCheck, table: RouteTable, redis: RedisServer) -> None:
        self.check, self.table, self.redis = check, table, redis

    async def ask(self, ticket: str | None = None, *, route: str = ROUTE, cookie: bool = False) -> tuple[int, dict[str, str], dict[str, object]]:
        headers = {"x-request-id": "req-1", "x-forwarded-for": "203.0.113.9", ROUTE_HEADER: route}
        if ticket is not None:
            if cookie:
                headers["cookie"] = f"session=abc; {cookie_name(route)}={ticket}"
            else:
                headers[TICKET_HEADER] = ticket
        status, found, body = parse(await self.check(Request("GET", "/launch", headers)))
        return status, found, (json.loads(body) if body else {})


@pytest.fixture
async def room(redis: RedisServer) -> AsyncIterator[Room]:
    authorizer, _ = await issuer_authorizer()
    limiter = Limiter(url=redis.url, timeout=0.5)
    gate = WaitingRoomGate(WaitingRoomStore(limiter.redis), TicketSigner(KEY), limiter.local)
    table = RouteTable(CheckParts(authorizer, DenialAudit(MemoryAuditSink()), limiter, gate))
    yield Room(HttpCheck(table), table, redis)
    await limiter.close()


async def test_a_crowd_gets_tickets_in_arrival_order_and_its_turns_come_at_the_rate(room: Room) -> None:
    room.table.replace([room_policy(rate=5)])
    answers = [await room.ask() for _ in range(12)]
    assert [a[0] for a in answers[:5]] == [200] * 5, "an empty room admits up to one second's worth at once"
    waiting = answers[5:]
    assert [a[2]["position"] for a in waiting] == [1, 2, 3, 4, 5, 6, 7]
    for status, headers, body in waiting:
        assert status == 429 and headers[MARKER_HEADER] == "waiting", "Envoy's mapper makes this the client's 503"
        assert headers["retry-after"] == str(body["retryAfter"]) and body["retryAfter"] >= 1
        assert body["error"] == {"code": "waiting_room", "message": "You are in the waiting room; retry with your ticket.", "request_id": "req-1"}
        assert headers["set-cookie"].startswith(f"{cookie_name(ROUTE)}={headers[TICKET_HEADER]};")
    assert waiting[-1][2]["estimatedWaitSeconds"] == 1.4 and waiting[-1][2]["retryAfter"] == 2
    # Later arrivals queue behind the tickets even when a turn is free.
    status, _, body = await room.ask()
    assert status == 429 and body["position"] == 8


@pytest.mark.parametrize("no_shows", [0, 5])
async def test_turns_come_strictly_in_ticket_order_whatever_order_clients_return_in(room: Room, no_shows: int) -> None:
    """Every waiting client comes back each round, in a shuffled order: a ticket is never
    admitted in an earlier round than any ticket ahead of it, positions never grow, and the
    queue drains at the rate. (Through Envoy, with clients returning after Retry-After, the
    order can only be seen between tickets far apart: test_waiting_room_envoy.py.)

    With ``no_shows``, positions 1 to 5 never come back: their turns pass on once their
    Retry-After plus the grace is over, and the rest drain at the rate behind them (before,
    they stalled until the no-shows' tickets expired: ticketTtl, 30 s here)."""
    rate, crowd = 5, 15
    room.table.replace([room_policy(rate=rate)])
    assert [(await room.ask())[0] for _ in range(rate)] == [200] * rate
    tickets: list[str] = []
    for position in range(1, no_shows + crowd + 1):
        status, headers, body = await room.ask()
        assert (status, body["position"]) == (429, position)
        tickets.append(headers[TICKET_HEADER])
    tickets = tickets[no_shows:]
    order = random.Random(7)
    admitted_in: dict[int, int] = {}
    admitted_at: list[float] = []
    last_position = {i: no_shows + i + 1 for i in range(crowd)}
    started = time.monotonic()
    for round_ in range(60):
        await asyncio.sleep(0.25)
        waiting = [i for i in range(crowd) if i not in admitted_in]
        if not waiting:
            break
        order.shuffle(waiting)
        for i in waiting:
            status, _, body = await room.ask(tickets[i])
            if status == 200:
                admitted_in[i] = round_
                admitted_at.append(time.monotonic())
            else:
                assert status == 429 and body["position"] <= last_position[i], (i, body, last_position[i])
                last_position[i] = body["position"]
    took = time.monotonic() - started
    assert sorted(admitted_in) == list(range(crowd)), f"every ticket was admitted (took {took:.2f} s)"
    rounds = [admitted_in[i] for i in range(crowd)]
    assert rounds == sorted(rounds), f"admitted out of ticket order: rounds by ticket {rounds}"
    # The no-shows' turns (one second's worth) are held for their Retry-After (1 s) plus the grace.
    held = (TURN_GRACE_MS / 1000 + 1.0) if no_shows else 0.0
    assert crowd / rate - 1.0 <= took <= crowd / rate + held + 3.0, f"{crowd} tickets at {rate}/s took {took:.2f} s"
    busiest = max(sum(1 for t in admitted_at if start <= t < start + 1.0) for start in admitted_at)
    assert busiest <= 2 * rate, f"at most two seconds' worth in any second: {busiest}"


async def test_a_client_that_missed_its_turn_takes_the_next_one(room: Room) -> None:
    """B's turn passes to C once B's Retry-After plus the grace is over; B, back later, goes
    ahead of D (who arrived meanwhile) and is admitted at the next turn."""
    room.table.replace([room_policy(rate=1)])
    assert (await room.ask())[0] == 200
    _, b_headers, b = await room.ask()
    _, c_headers, c = await room.ask()
    assert (b["position"], b["retryAfter"], c["position"], c["retryAfter"]) == (1, 1, 2, 2)
    started = time.monotonic()
    while (await room.ask(c_headers[TICKET_HEADER]))[0] != 200:
        assert time.monotonic() - started < 2 + TURN_GRACE_MS / 1000 + 1.5, "B's missed turn passed to C"
        await asyncio.sleep(0.1)
    status, d_headers, d = await room.ask()
    assert (status, d["position"]) == (429, 1)
    d_ticket = d_headers[TICKET_HEADER]
    status, _, b = await room.ask(b_headers[TICKET_HEADER])
    if status == 200:  # half a turn or more was in hand: B, now at the head, took it
        status, _, d = await room.ask(d_ticket)
        assert (status, d["position"]) == (429, 1), "B went ahead of D"
        return
    assert (status, b["position"]) == (429, 1), "B takes the next turn"
    status, _, d = await room.ask(d_ticket)
    assert (status, d["position"]) == (429, 2), "D is now behind B"
    started = time.monotonic()
    while (await room.ask(b_headers[TICKET_HEADER]))[0] != 200:
        assert time.monotonic() - started < 2.5, "B admitted at the next turn"
        assert (await room.ask(d_ticket))[0] == 429, "D is not admitted before B"
        await asyncio.sleep(0.1)


async def test_retry_after_stays_within_half_the_ticket_ttl(room: Room) -> None:
    """A client told to come back later than its ticket lives would find it expired (and
    arrive again at the back): Retry-After is at most half of ticketTtl."""
    room.table.replace([room_policy(rate=1, ttl_ms=6_000)])
    assert (await room.ask())[0] == 200
    answers = [await room.ask() for _ in range(8)]
    assert [a[2]["retryAfter"] for a in answers] == [1, 2, 3, 3, 3, 3, 3, 3]
    assert [a[1]["retry-after"] for a in answers] == ["1", "2", "3", "3", "3", "3", "3", "3"]
    assert answers[-1][2]["estimatedWaitSeconds"] == 8


async def test_no_second_admits_more_than_two_seconds_worth_whatever_clients_do(room: Room) -> None:
    """The bound with no-shows, late and early returners mixed: turns passed on and turns
    taken a little early never let more than 2 x rate through in any second, nor more than
    rate a second (plus one second's worth) over the run."""
    rate, crowd = 5, 40
    room.table.replace([room_policy(rate=rate)])
    behaviour = random.Random(11)
    admitted: list[float] = []

    async def client(i: int) -> None:
        style = behaviour.choice(["never", "late", "keeps-time", "eager"])
        status, headers, body = await room.ask()
        if status == 200:
            admitted.append(time.monotonic())
            return
        if style == "never":
            return
        ticket = headers[TICKET_HEADER]
        while status != 200:
            wait = {"late": body["retryAfter"] + 1.5, "keeps-time": body["retryAfter"], "eager": 0.1}[style]
            await asyncio.sleep(wait * behaviour.uniform(0.9, 1.1))
            status, _, body = await room.ask(ticket)
        admitted.append(time.monotonic())

    started = time.monotonic()
    await asyncio.gather(*(client(i) for i in range(crowd)))
    took = time.monotonic() - started
    assert len(admitted) >= crowd // 2, len(admitted)
    busiest = max(sum(1 for t in admitted if start <= t < start + 1.0) for start in admitted)
    assert busiest <= 2 * rate, f"at most two seconds' worth in any second: {busiest}"
    assert len(admitted) <= rate * took + rate + 1, (len(admitted), took)


async def test_a_ticket_admits_once_and_only_on_its_route(room: Room) -> None:
    room.table.replace([room_policy(rate=1), room_policy("shop/other", rate=1)])
    assert (await room.ask())[0] == 200
    status, headers, body = await room.ask()
    assert status == 429 and body["position"] == 1
    ticket = headers[TICKET_HEADER]
    forged = ticket[:-2] + ("AA" if not ticket.endswith("AA") else "BB")
    for bad in (forged, "1", ticket + "x"):
        status, headers, body = await room.ask(bad)
        assert (status, body["error"]["code"]) == (403, "waiting_room_ticket_invalid")  # type: ignore[index]
        assert headers["set-cookie"].startswith(f"{cookie_name(ROUTE)}=; Max-Age=0")
    status, _, body = await room.ask(ticket, route="shop/other")
    assert (status, body["error"]["code"]) == (403, "waiting_room_ticket_invalid"), "bound to its route"  # type: ignore[index]
    # Its turn comes within a second (one turn a second); by cookie this time.
    deadline = time.monotonic() + 3
    while True:
        status, headers, _ = await room.ask(ticket, cookie=True)
        if status == 200 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert status == 200 and headers["set-cookie"].startswith(f"{cookie_name(ROUTE)}=; Max-Age=0"), "the spent ticket's cookie is cleared"
    status, _, body = await room.ask(ticket)
    assert (status, body["error"]["code"]) == (403, "waiting_room_ticket_used")  # type: ignore[index]


async def test_max_waiting_bounds_the_room(room: Room) -> None:
    room.table.replace([room_policy(rate=1, max_waiting=2)])
    statuses = [(await room.ask())[0] for _ in range(3)]
    assert statuses == [200, 429, 429]
    status, headers, body = await room.ask()
    assert (status, headers[MARKER_HEADER], body["error"]["code"]) == (429, "full", "waiting_room_full")  # type: ignore[index]
    assert int(headers["retry-after"]) >= 1 and TICKET_HEADER not in headers


@pytest.mark.parametrize(("on_failure", "expected"), [("open", [200, 200, 200]), ("closed", [429, 429, 429]), ("local", [200, 200, 429])])
async def test_a_redis_outage_follows_on_store_failure(room: Room, on_failure: str, expected: list[int]) -> None:
    room.table.replace([room_policy(rate=2, on_failure=on_failure)])
    assert (await room.ask())[0] == 200
    room.redis.stop()
    answers = [await room.ask() for _ in range(3)]
    assert [a[0] for a in answers] == expected
    for status, headers, body in answers:
        if status == 429:
            code = "waiting_room_unavailable" if on_failure == "closed" else "waiting_room"
            assert body["error"]["code"] == code and headers["retry-after"] == "1" and TICKET_HEADER not in headers  # type: ignore[index]


def test_a_room_without_a_gate_is_refused_alone() -> None:
    table = RouteTable(CheckParts(DenialAudit(MemoryAuditSink())))  # public routes only: refusals, no request
    subscription = RouteSubscription(table, Policies.model_validate({"xds": {"address": "127.0.0.1:1"}}))
    other = policy_pb2.RoutePolicy(route="shop/plain")
    other.auth.public = True
    with pytest.raises(PartlyApplied, match="route shop/launch: has a waiting room, and ext_authz has no http.waitingRoom"):
        subscription._apply([room_policy(), other])
    assert list(table.routes) == ["shop/plain"] and list(table.refused) == ["shop/launch"]
