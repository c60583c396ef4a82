"""Operator control (GET /breakers, POST /breakers/{ns}/{name}/{action}): the credential
(401, never echoed, audited), 400 naming the field, 404 for a route without a breaker, the
audit events, and what pinning means to the detector (fake clock and timers)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import REGISTRY

from control_plane.breakers import board_metrics
from control_plane.breakers.board import Actor, BreakerBoard, Phase
from control_plane.breakers.detector import BreakerDetector
from control_plane.breakers.operator_api import OperatorEndpoint
from servicekit.audit import ADMIN_CALL, BREAKER_TRANSITION, MemoryAuditSink
from tests.unit.control_plane.breakers.test_detector import Clock, Timers, calls
from tests.unit.control_plane.breakers.test_window_and_machine import rule

CREDENTIAL = "operator-credential-0123456789"
ROUTE = "shop/orders"
OTHER = "shop/other"
AUTH = {"Authorization": f"Bearer {CREDENTIAL}", "X-Gatehouse-Operator": "alice@laptop"}


@dataclass
class Harness:
    http: TestClient[web.Request, web.Application]
    board: BreakerBoard
    detector: BreakerDetector
    timers: Timers
    audit: MemoryAuditSink

    async def post(self, route: str, action: str, body: object = None, headers: dict[str, str] | None = None) -> tuple[int, dict[str, object]]:
        data = json.dumps(body) if body is not None else None
        response = await self.http.post(f"/breakers/{route}/{action}", data=data, headers=AUTH if headers is None else headers)
        return response.status, await response.json()

    def operator_moves(self) -> list[tuple[str, str, object]]:
        return [
            (str(e.details["action"]), str(e.details["to"]), e.details["pinned"])
            for e in self.audit.of_kind(BREAKER_TRANSITION)
            if e.actor == "operator"
        ]


async def _harness(credential: str | None) -> AsyncIterator[Harness]:
    clock = Clock()
    timers = Timers(clock)
    board = BreakerBoard(clock=clock)
    audit = MemoryAuditSink()
    detector = BreakerDetector(board, audit=audit, clock=clock, schedule=timers)
    rules = {ROUTE: rule(), OTHER: rule(route_id=OTHER)}
    detector.set_rules(rules)  # as the tally endpoint does in the service
    endpoint = OperatorEndpoint(detector, credential=credential, rules=lambda: rules, audit=audit)
    app = web.Application()
    app.add_routes(endpoint.routes())
    async with TestClient(TestServer(app)) as http:
        yield Harness(http, board, detector, timers, audit)


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    async for harness in _harness(CREDENTIAL):
        yield harness


async def test_a_missing_or_wrong_credential_is_401_unechoed_audited_and_moves_nothing(h: Harness) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong-credential-xxxxxxxx"}, {"Authorization": f"Basic {CREDENTIAL}"}):
        response = await h.http.post(f"/breakers/{ROUTE}/open", headers=headers)
        text = await response.text()
        assert response.status == 401 and "wrong-credential" not in text and CREDENTIAL not in text
    assert h.board.get(ROUTE).phase is Phase.CLOSED
    refused = h.audit.of_kind(ADMIN_CALL)
    assert [(e.actor, e.details["outcome"], e.details["method"]) for e in refused] == [("unauthenticated", "unauthenticated", "breaker.open")] * 3
    assert CREDENTIAL not in json.dumps([e.as_dict() for e in h.audit.events])
    assert h.audit.of_kind(BREAKER_TRANSITION) == []


async def test_an_unknown_route_is_404_only_after_the_credential(h: Harness) -> None:
    status, body = await h.post("shop/nope", "open", headers={})
    assert status == 401, "an unauthenticated caller learns nothing of the routes"
    status, body = await h.post("shop/nope", "open")
    assert status == 404 and body["error"] == "no route 'shop/nope' with a breaker (circuitBreaker.errorRate)"
    response = await h.http.get("/breakers", params={"route": "shop/nope"})
    assert response.status == 404


@pytest.mark.parametrize(
    ("action", "body", "headers", "error"),
    [
        ("opne", None, AUTH, "action: 'opne' is not one of open, close, half-open, release"),
        ("open", [1], AUTH, "body: must be a JSON object"),
        ("open", {"openfor": "1m"}, AUTH, "body: unknown field 'openfor' (known: openFor, reason)"),
        ("open", {"openFor": "soon"}, AUTH, "openFor: 'soon' is not a duration; use forms like 250ms, 10s, 1m30s, 1h"),
        ("open", {"openFor": "500ms"}, AUTH, "openFor: from 1s to 168h"),
        ("open", {"openFor": "200h"}, AUTH, "openFor: from 1s to 168h"),
        ("close", {"openFor": "1m"}, AUTH, "openFor: only for open, not close"),
        ("close", {"reason": "x" * 257}, AUTH, "reason: at most 256 printable characters"),
        ("close", {"reason": "a\nb"}, AUTH, "reason: at most 256 printable characters"),
        ("close", None, {**AUTH, "X-Gatehouse-Operator": "y" * 65}, "X-Gatehouse-Operator: at most 64 printable characters"),
    ],
)
async def test_a_bad_request_is_400_naming_the_field_and_moves_nothing(
    h: Harness, action: str, body: object, headers: dict[str, str], error: str
) -> None:
    status, answer = await h.post(ROUTE, action, body, headers)
    assert status == 400 and str(answer["error"]).startswith(error), answer
    assert h.board.get(ROUTE).generation == 0 and h.audit.events == []


async def test_without_an_operator_credential_moves_are_503_and_the_list_still_works() -> None:
    async for h in _harness(None):
        status, body = await h.post(ROUTE, "open")
        assert status == 503 and "breakers.operatorCredentialFile" in str(body["error"])
        response = await h.http.get("/breakers")
        listed = await response.json()
        assert response.status == 200 and listed["operator_control"] is False and len(listed["breakers"]) == 2


async def test_a_pinned_open_holds_against_the_timer_and_good_probes_until_close_then_release(h: Harness) -> None:
    status, body = await h.post(ROUTE, "open", {"reason": "INC-42 orders db failover"})
    state = body["breaker"]
    assert status == 200 and body["changed"] is True
    assert (state["phase"], state["pinned"], state["actor"], state["reason"]) == ("open", True, "operator", "INC-42 orders db failover")
    h.timers.advance(600)
    h.detector.ingest(calls(h.timers, 50))
    assert h.board.get(ROUTE).phase is Phase.OPEN, "pinned: no half-open after waitInOpen"

    status, body = await h.post(ROUTE, "close")
    assert body["breaker"]["phase"] == "closed" and body["breaker"]["pinned"] is True
    h.detector.ingest(calls(h.timers, 50, 50))
    assert h.board.get(ROUTE).phase is Phase.CLOSED, "pinned closed: 100 % failures do not open it"
    assert h.detector.window(ROUTE).failures == 50, "but the detector keeps counting"

    status, body = await h.post(ROUTE, "release")
    assert body["changed"] is True and body["breaker"]["pinned"] is False and body["breaker"]["phase"] == "closed"
    h.detector.ingest(calls(h.timers, 10, 10))
    assert h.board.get(ROUTE).phase is Phase.OPEN and h.board.get(ROUTE).actor is Actor.DETECTOR, "released: the detector opens it"
    assert h.operator_moves() == [("open", "open", True), ("close", "closed", True), ("release", "closed", False)]
    opened = h.audit.of_kind(BREAKER_TRANSITION)[0]
    assert opened.subject == ROUTE and opened.details["operator"] == "alice@laptop" and opened.details["from"] == "closed"


async def test_open_for_a_while_then_the_detector_probes_decide(h: Harness) -> None:
    status, body = await h.post(ROUTE, "open", {"openFor": "30s"})
    state = body["breaker"]
    assert state["pinned"] is False and state["open_until"] == pytest.approx(h.timers.clock.now + 30)
    assert state["reason"] == "operator open by alice@laptop"
    h.timers.advance(29)
    assert h.board.get(ROUTE).phase is Phase.OPEN
    h.timers.advance(1.5)
    assert h.board.get(ROUTE).phase is Phase.HALF_OPEN and h.board.get(ROUTE).actor is Actor.DETECTOR
    h.detector.ingest(calls(h.timers, 3))
    assert h.board.get(ROUTE).phase is Phase.CLOSED


async def test_open_for_on_an_open_breaker_extends_it(h: Harness) -> None:
    h.detector.ingest(calls(h.timers, 10, 10))
    assert h.board.get(ROUTE).phase is Phase.OPEN  # the detector's, waitInOpen 5 s
    status, body = await h.post(ROUTE, "open", {"openFor": "1m"})
    assert body["changed"] is True and body["breaker"]["actor"] == "operator"
    h.timers.advance(10)
    assert h.board.get(ROUTE).phase is Phase.OPEN, "the operator's minute, not the detector's 5 s"


async def test_half_open_gives_fresh_probes_and_a_failing_probe_reopens(h: Harness) -> None:
    await h.post(ROUTE, "open")
    status, body = await h.post(ROUTE, "half-open")
    assert body["breaker"]["phase"] == "half-open" and body["breaker"]["pinned"] is False
    h.detector.ingest(calls(h.timers, 1, 1))
    assert h.board.get(ROUTE).phase is Phase.OPEN and h.board.get(ROUTE).reason.startswith("half-open probe failed")


async def test_a_released_pinned_open_waits_wait_in_open_then_probes(h: Harness) -> None:
    await h.post(ROUTE, "open")
    h.timers.advance(100)
    status, body = await h.post(ROUTE, "release")
    assert body["breaker"]["phase"] == "open" and body["breaker"]["pinned"] is False
    h.timers.advance(4.9)
    assert h.board.get(ROUTE).phase is Phase.OPEN
    h.timers.advance(0.2)
    assert h.board.get(ROUTE).phase is Phase.HALF_OPEN


async def test_a_call_that_changes_nothing_says_so_and_is_not_audited(h: Harness) -> None:
    status, body = await h.post(ROUTE, "release")
    assert status == 200 and body["changed"] is False
    await h.post(ROUTE, "close")
    status, body = await h.post(ROUTE, "close")
    assert body["changed"] is False
    assert h.operator_moves() == [("close", "closed", True)]


async def test_the_list_shows_every_breaker_route_with_its_counts(h: Harness) -> None:
    h.detector.ingest(calls(h.timers, 4, 1))
    await h.post(OTHER, "open")
    response = await h.http.get("/breakers")
    listed = await response.json()
    assert listed["operator_control"] is True
    by_route = {b["route"]: b for b in listed["breakers"]}
    assert list(by_route) == [ROUTE, OTHER]
    assert by_route[ROUTE]["phase"] == "closed" and by_route[ROUTE]["actor"] == "detector" and by_route[ROUTE]["since"] is None
    assert by_route[ROUTE]["window"] == {"counting": "window", "calls": 4, "failures": 1, "slow": 0}
    assert by_route[OTHER]["phase"] == "open" and by_route[OTHER]["pinned"] is True and by_route[OTHER]["open_until"] is None
    one = await (await h.http.get("/breakers", params={"route": OTHER})).json()
    assert [b["route"] for b in one["breakers"]] == [OTHER]


async def test_the_state_metric_says_each_route_phase_and_moves_are_counted_by_actor(h: Harness) -> None:
    board_metrics.BOARD.watch(h.board, lambda: {ROUTE: rule(), OTHER: rule(route_id=OTHER)})
    before = REGISTRY.get_sample_value("gatehouse_breaker_transitions_total", {"to": "open", "actor": "operator"}) or 0.0
    await h.post(OTHER, "open")

    def sample(route: str, phase: str) -> float | None:
        return REGISTRY.get_sample_value("gatehouse_breaker_state", {"route": route, "phase": phase})

    assert (sample(OTHER, "open"), sample(OTHER, "closed"), sample(OTHER, "half-open")) == (1.0, 0.0, 0.0)
    assert (sample(ROUTE, "open"), sample(ROUTE, "closed")) == (0.0, 1.0)
    assert REGISTRY.get_sample_value("gatehouse_breaker_pinned", {"route": OTHER}) == 1.0
    assert REGISTRY.get_sample_value("gatehouse_breaker_transitions_total", {"to": "open", "actor": "operator"}) == before + 1
    board_metrics.BOARD.watch(h.board, dict)
    assert sample(OTHER, "open") is None, "a route without a breaker leaves the scrape"
