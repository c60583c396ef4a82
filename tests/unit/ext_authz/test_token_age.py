"""The token-age step in the HTTP check: a route's ``maxTokenAge`` lets in a token issued
recently and refuses an older one, or one without ``iat``, with 401 ``token_too_old``,
audited; routes without the bound take any age."""

from __future__ import annotations

import json

import pytest

from ext_authz.check.http_check import HttpCheck
from ext_authz.check.route_table import RouteTable
from ext_authz.check.steps import CheckParts
from ext_authz.denial_audit import DenialAudit
from ext_authz.service import Authorizer
from ext_authz.tokens.jwks import IssuerKeys
from ext_authz.tokens.verifier import TokenVerifier
from servicekit.audit import AUTHZ_DENIED, MemoryAuditSink
from servicekit.check_contract import ROUTE_HEADER
from servicekit.http1_server import Request
from servicekit.protos.gatehouse.policy.v1 import policy_pb2
from tests.unit.ext_authz.signing import ISSUER, NOW, FakeClock, FakeSource, claims, issuer, rsa_key

FIVE_MINUTES_MS = 300_000


class Gate:
    def __init__(self, check: HttpCheck, audit: MemoryAuditSink) -> None:
        self.check, self.audit = check, audit

    async def ask(self, route: str, token: str) -> tuple[int, dict[str, object]]:
        headers = {"x-request-id": "req-1", ROUTE_HEADER: route, "authorization": f"Bearer {token}"}
        raw = await self.check(Request("GET", "/payments", headers))
        head, _, body = raw.partition(b"\r\n\r\n")
        return int(head.split()[1]), (json.loads(body)["error"] if body else {})


@pytest.fixture
async def gate() -> Gate:
    clock = FakeClock(NOW)
    config = issuer()
    keys = IssuerKeys(config, FakeSource(rsa_key().jwk()), clock=FakeClock(100.0))
    await keys.refresh()
    verifier = TokenVerifier([keys], cache_size=100, max_token_bytes=8192, clock=clock)
    audit = MemoryAuditSink()
    table = RouteTable(CheckParts(Authorizer(verifier, {ISSUER: config}, None, clock=clock), DenialAudit(audit)))
    bounded = policy_pb2.RoutePolicy(route="shop/payments")
    bounded.auth.max_token_age_ms = FIVE_MINUTES_MS
    unbounded = policy_pb2.RoutePolicy(route="shop/orders")
    unbounded.auth.audiences.append("api")
    table.replace([bounded, unbounded])
    return Gate(HttpCheck(table), audit)


@pytest.mark.parametrize("age", [0, 10, 299, 300])
async def test_a_token_issued_within_the_bound_is_let_in(gate: Gate, age: int) -> None:
    status, _ = await gate.ask("shop/payments", rsa_key().sign(claims(iat=int(NOW) - age, nbf=int(NOW) - age)))
    assert status == 200


@pytest.mark.parametrize(
    "overrides",
    [{"iat": int(NOW) - 301, "nbf": int(NOW) - 301}, {"iat": int(NOW) - 86_400, "nbf": None}, {"iat": None}, {"iat": "recent"}],
    ids=["just-over", "a-day", "no-iat", "iat-text"],
)
async def test_an_older_token_or_one_without_iat_is_401_token_too_old_and_audited(gate: Gate, overrides: dict[str, object]) -> None:
    token = rsa_key().sign(claims(**overrides))
    status, body = await gate.ask("shop/payments", token)
    if overrides.get("iat") == "recent":
        assert status == 401 and body["reason"] != "token_too_old", "the verifier refuses a malformed iat first"
        return
    assert status == 401 and (body["code"], body["reason"]) == ("invalid_token", "token_too_old")
    assert "sign in again" in str(body["message"]) and token not in json.dumps(body)
    [event] = [e for e in gate.audit.events if e.kind == AUTHZ_DENIED]
    assert (event.reason, event.details.get("route"), event.subject) == ("token_too_old", "shop/payments", "user-1")
    assert token not in json.dumps(event.as_dict())


async def test_a_route_without_the_bound_takes_any_age(gate: Gate) -> None:
    status, _ = await gate.ask("shop/orders", rsa_key().sign(claims(iat=int(NOW) - 86_400, nbf=None)))
    assert status == 200
