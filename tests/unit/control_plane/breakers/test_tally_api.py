"""POST /breakers/tallies: the credential, malformed bodies (400 naming the field, nothing
counted), unknown routes (ignored and counted), and the rules in the answer."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from control_plane.breakers.board import BreakerBoard, Phase
from control_plane.breakers.detector import BreakerDetector
from control_plane.breakers.tally_api import PATH, TallyEndpoint
from servicekit.audit import MemoryAuditSink
from tests.unit.control_plane.breakers.test_window_and_machine import rule

CREDENTIAL = "tally-credential-0123456789"
ROUTE = "shop/orders"


@pytest.fixture
async def client() -> AsyncIterator[tuple[TestClient[web.Request, web.Application], BreakerBoard]]:
    board = BreakerBoard()
    detector = BreakerDetector(board, audit=MemoryAuditSink())
    rules = {ROUTE: rule()}
    endpoint = TallyEndpoint(detector, credential=CREDENTIAL, rules=lambda: rules)
    app = web.Application()
    app.add_routes(endpoint.routes())
    async with TestClient(TestServer(app)) as test_client:
        yield test_client, board


AUTH = {"Authorization": f"Bearer {CREDENTIAL}"}


async def test_a_bad_credential_is_refused_without_echoing_it(client: tuple[TestClient[web.Request, web.Application], BreakerBoard]) -> None:
    http, board = client
    for headers in ({}, {"Authorization": "Bearer wrong-credential-xxxxxxxx"}, {"Authorization": f"Basic {CREDENTIAL}"}):
        response = await http.post(PATH, data=json.dumps({"tallies": [{"route": ROUTE, "bucket": 0, "calls": 50, "failures": 50, "slow": 0}]}), headers=headers)
        text = await response.text()
        assert response.status == 401 and "wrong-credential" not in text and CREDENTIAL not in text
    assert board.get(ROUTE).phase is Phase.CLOSED


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"not json", "body: not JSON"),
        (b"[]", "body: must be a JSON object"),
        (json.dumps({"talies": []}).encode(), "body: unknown field 'talies'"),
        (json.dumps({"tallies": [{"route": ROUTE, "bucket": 0, "calls": 0, "failures": 0, "slow": 0}]}).encode(), "tallies[0].calls: must be an integer from 1"),
        (json.dumps({"tallies": [{"route": ROUTE, "bucket": 0, "calls": 3, "failures": 4, "slow": 0}]}).encode(), "tallies[0].failures: must be an integer from 0 to 3"),
        (json.dumps({"tallies": [{"route": 7, "bucket": 0, "calls": 3, "failures": 0, "slow": 0}]}).encode(), "tallies[0].route: must be a route id"),
    ],
)
async def test_a_malformed_body_is_400_with_the_field_and_counts_nothing(
    client: tuple[TestClient[web.Request, web.Application], BreakerBoard], body: bytes, reason: str
) -> None:
    http, board = client
    good = {"route": ROUTE, "bucket": 0, "calls": 50, "failures": 50, "slow": 0}
    if body.startswith(b"{") and b"tallies" in body:
        data = json.loads(body)
        if "tallies" in data:
            data["tallies"].insert(0, good)
            body = json.dumps(data).encode()
            reason = reason.replace("tallies[0]", "tallies[1]")
    response = await http.post(PATH, data=body, headers=AUTH)
    assert response.status == 400
    assert (await response.json())["error"].startswith(reason)
    assert board.get(ROUTE).phase is Phase.CLOSED, "the good tally in the same batch was not counted"


async def test_unknown_routes_are_ignored_and_the_rules_come_back_once(client: tuple[TestClient[web.Request, web.Application], BreakerBoard]) -> None:
    http, board = client
    response = await http.post(PATH, data=json.dumps({"tallies": [{"route": "shop/gone", "bucket": 0, "calls": 5, "failures": 5, "slow": 0}]}), headers=AUTH)
    answer = await response.json()
    assert response.status == 200 and answer["unknownRoute"] == 1 and answer["accepted"] == 0
    assert answer["rules"] == {ROUTE: {"clusters": ["shop/orders:8080"], "failOn": ["5xx"], "slowCallMs": None}}
    again = await (await http.post(PATH, data=json.dumps({"rulesVersion": answer["rulesVersion"], "tallies": []}), headers=AUTH)).json()
    assert "rules" not in again and again["rulesVersion"] == answer["rulesVersion"]
    assert "shop/gone" not in board.states()
