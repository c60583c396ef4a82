"""The HTTP check's one-call decision against a real redis-server: token and limits together.

In process (the handler ``Http1Server`` calls), a real Limiter on a real Redis: per-IP
limits count before the token (token guessing is limited), a bad token moves no user's
counter, a user over their limit gets 429 with the headers and gives the IP hit back,
shadow limits never deny, and a Redis outage follows each limit's onStoreFailure.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
import redis as redis_client

from ext_authz.denial_audit import DenialAudit
from ext_authz.check.http_check import HttpCheck
from ext_authz.check.route_table import RouteTable
from ext_authz.check.steps import CheckParts
from servicekit.check_contract import ROUTE_HEADER
from ext_authz.tokens.jwks import IssuerKeys
from ext_authz.service import Authorizer
from ext_authz.tokens.verifier import TokenVerifier
from limiter import Limiter
from limiter.keys import counter_key
from limiter.policies import limit_spec
from servicekit.audit import MemoryAuditSink
from servicekit.http1_server import Request
from servicekit.protos.gatehouse.policy.v1 import policy_pb2
from tests.harness.redis import RedisServer
from tests.harness.window_clock import delay_to_settle
from tests.unit.ext_authz.signing import ISSUER, NOW, FakeClock, FakeSource, claims, issuer, rsa_key
from ext_authz.tokens.principal import token_principal

ROUTE = "shop/orders"
USER_1 = f"user={token_principal(ISSUER, 'user-1')}"
"""user-1's ``user`` counter: keyed by the principal (issuer and id), never the bare id."""
PEER = "203.0.113.9"


def policy(*limits: policy_pb2.Limit, audiences: tuple[str, ...] = ()) -> policy_pb2.RoutePolicy:
    route = policy_pb2.RoutePolicy(route=ROUTE, limits=list(limits))
    route.auth.SetInParent()
    route.auth.audiences.extend(audiences)
    return route


def limit(index: int, key: str, count: int, **fields: object) -> policy_pb2.Limit:
    return policy_pb2.Limit(
        id=f"{ROUTE}#{index}", key=key, algorithm="fixedWindow", limit=count, window_ms=60_000, mode="exact", **fields
    )


def parse(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode().split("\r\n")
    return int(status_line.split()[1]), {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}, body


class Gate:
    def __init__(self, check: HttpCheck, table: RouteTable, limiter: Limiter, redis: RedisServer) -> None:
        self.check, self.table, self.limiter, self.redis = check, table, limiter, redis

    async def ask(self, token: str | None, *, peer: str = PEER, route: str = ROUTE) -> tuple[int, dict[str, str], bytes]:
        headers = {"x-request-id": "req-1", "x-forwarded-for": f"198.51.100.1, {peer}", ROUTE_HEADER: route}
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        return parse(await self.check(Request("GET", "/orders", headers)))

    def count(self, lim: policy_pb2.Limit, key: str) -> int:
        """The fixed-window counter's hits (a hash: window index ``w``, count ``c``)."""
        with redis_client.Redis.from_url(self.redis.url) as client:
            value = client.hget(counter_key(limit_spec(lim), key), "c")
        return int(value) if value else 0


async def issuer_authorizer() -> tuple[Authorizer, FakeClock]:
    """The check's Authorizer for the test issuer of tests.unit.ext_authz.signing, and its clock."""
    clock = FakeClock(NOW)
    config = issuer()
    keys = IssuerKeys(config, FakeSource(rsa_key().jwk()), clock=FakeClock(100.0))
    await keys.refresh()
    verifier = TokenVerifier([keys], cache_size=100, max_token_bytes=8192, clock=clock)
    return Authorizer(verifier, {ISSUER: config}, None, clock=clock), clock


@pytest.fixture
async def gate(redis: RedisServer) -> AsyncIterator[Gate]:
    authorizer, _ = await issuer_authorizer()
    await asyncio.sleep(delay_to_settle(60_000, 5_000))  # each test's counted hits in one fixed window
    limiter = Limiter(url=redis.url, timeout=0.5)
    table = RouteTable(CheckParts(authorizer, DenialAudit(MemoryAuditSink()), limiter))
    yield Gate(HttpCheck(table), table, limiter, redis)
    await limiter.close()


async def test_a_bad_token_counts_against_the_ip_and_moves_no_users_counter(gate: Gate) -> None:
    per_ip, per_user = limit(0, "ip", 3), limit(1, "user", 10)
    gate.table.replace([policy(per_ip, per_user)])
    statuses = [(await gate.ask("not-a-token"))[0] for _ in range(4)]
    assert statuses == [401, 401, 401, 429], "token guessing from one address is limited"
    assert gate.count(per_ip, f"remote_address={PEER}") == 3
    assert gate.count(per_user, USER_1) == 0
    status, headers, body = await gate.ask(rsa_key().sign(claims()))
    assert status == 429 and headers["retry-after"] and headers["x-ratelimit-remaining"] == "0"
    assert json.loads(body)["error"] == {"code": "rate_limited", "message": "Too many requests; retry later.", "request_id": "req-1"}
    assert (await gate.ask(rsa_key().sign(claims()), peer="203.0.113.10"))[0] == 200, "another address is not limited"


async def test_a_user_over_the_limit_gets_429_and_the_ip_hit_back(gate: Gate) -> None:
    per_ip, per_user = limit(0, "ip", 100), limit(1, "user", 2)
    gate.table.replace([policy(per_ip, per_user)])
    token = rsa_key().sign(claims())
    first = await gate.ask(token)
    assert first[0] == 200 and first[1]["x-user-id"] == "user-1"
    assert (first[1]["x-ratelimit-limit"], first[1]["x-ratelimit-remaining"]) == ("2", "1"), "the binding limit: least left"
    assert (await gate.ask(token))[0] == 200
    status, headers, _ = await gate.ask(token)
    assert status == 429 and headers["x-ratelimit-limit"] == "2" and int(headers["retry-after"]) >= 1
    assert gate.count(per_user, USER_1) == 2, "the denied hit is not counted"
    assert gate.count(per_ip, f"remote_address={PEER}") == 2, "nor the IP hit of the denied request"


async def test_shadow_limits_count_and_never_deny(gate: Gate) -> None:
    shadow = limit(0, "user", 1, shadow=True)
    gate.table.replace([policy(shadow)])
    token = rsa_key().sign(claims())
    assert [(await gate.ask(token))[0] for _ in range(3)] == [200, 200, 200]
    assert gate.count(shadow, USER_1) == 1, "a hit the shadow limit would deny is not counted"


async def test_an_unknown_route_fails_closed_and_retryable(gate: Gate) -> None:
    gate.table.replace([policy()])
    status, headers, body = await gate.ask(rsa_key().sign(claims()), route="shop/forged")
    assert (status, headers["retry-after"], json.loads(body)["error"]["reason"]) == (503, "1", "unknown_route")


async def test_the_route_requirements_come_from_the_table(gate: Gate) -> None:
    gate.table.replace([policy(audiences=("billing",))])
    status, _, body = await gate.ask(rsa_key().sign(claims()))
    assert (status, json.loads(body)["error"]["reason"]) == (403, "audience")


async def test_a_public_route_decides_its_limits_with_no_token_and_no_identity(gate: Gate) -> None:
    """``auth.public``: whatever the request carries (no token, a bad one, a good one), only
    the limits decide; nothing is sent upstream as identity, and ``user`` limits (no
    verified subject) never apply."""
    per_ip, per_user = limit(0, "ip", 3), limit(1, "user", 1)
    route = policy(per_ip, per_user)
    route.auth.public = True
    gate.table.replace([route])
    good = rsa_key().sign(claims())
    answers = [await gate.ask(None), await gate.ask("not-a-token"), await gate.ask(good), await gate.ask(good)]
    assert [a[0] for a in answers] == [200, 200, 200, 429], "the IP's 3, and no 401 for a bad token"
    assert answers[0][1]["x-ratelimit-limit"] == "3" and answers[2][1]["x-ratelimit-remaining"] == "0"
    assert not any("x-user-id" in a[1] or "x-envoy-auth-headers-to-remove" in a[1] for a in answers)
    assert gate.count(per_user, USER_1) == 0, "no subject, so the user limit never counts"
    assert json.loads(answers[3][2])["error"]["code"] == "rate_limited"


@pytest.mark.parametrize(("on_failure", "expected"), [("open", 200), ("closed", 429), ("local", 200)])
async def test_a_redis_outage_follows_on_store_failure(gate: Gate, on_failure: str, expected: int) -> None:
    gate.table.replace([policy(limit(0, "user", 5, on_store_failure=on_failure))])
    token = rsa_key().sign(claims())
    assert (await gate.ask(token))[0] == 200
    gate.redis.stop()
    assert (await gate.ask(token))[0] == expected
