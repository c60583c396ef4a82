"""The HTTP check's answer on a swap route, in process, with a real Limiter on a real
redis-server and a real RFC 8693 endpoint (tests/harness/token_exchange.py): the OK
answer carries the upstream's ``authorization`` after the identity headers, and a request
that gets no upstream token uses none of the route's limits (its hits go back)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from ext_authz.denial_audit import DenialAudit
from ext_authz.check.http_check import HttpCheck
from ext_authz.check.route_table import RouteTable
from ext_authz.check.steps import CheckParts
from ext_authz.swap.exchange import TokenExchange
from ext_authz.swap.signer import UpstreamSigner
from ext_authz.swap.tokens import SwapGrants, UpstreamTokens
from limiter import Limiter
from servicekit.audit import MemoryAuditSink
from tests.harness.ports import refused_port
from tests.harness.redis import RedisServer
from tests.harness.token_exchange import TokenExchangeServer
from tests.integration.test_http_check_limits import PEER, USER_1, Gate, issuer_authorizer, limit, policy
from tests.unit.ext_authz.signing import claims, rsa_key


class AnyUrl(frozenset[str]):
    """Every exchange URL is listed: these tests are about the swap, not the allow-list
    (tests/integration/test_attacks_envoy.py holds that to the operator's list)."""

    def __contains__(self, item: object) -> bool:
        return True


@pytest.fixture
async def swap_gate(redis: RedisServer) -> AsyncIterator[Gate]:
    authorizer, clock = await issuer_authorizer()
    limiter = Limiter(url=redis.url, timeout=0.5)
    async with aiohttp.ClientSession() as session:
        tokens = UpstreamTokens(
            signer=UpstreamSigner(ec.generate_private_key(ec.SECP256R1()), issuer="https://gateway.internal/"),
            exchange=TokenExchange(session, timeout=1.0), ttl=60.0, cache_size=100, clock=clock,
            grants=SwapGrants({"*": frozenset({"ledger"})}, AnyUrl()),
        )
        table = RouteTable(CheckParts(authorizer, DenialAudit(MemoryAuditSink()), limiter, tokens))
        check = HttpCheck(table)
        yield Gate(check, table, limiter, redis)
    await limiter.close()


def swap_policy(audience: str, url: str = "", *limits: object) -> object:
    route = policy(*limits)  # type: ignore[arg-type]
    route.upstream_token.audience = audience
    route.upstream_token.exchange_url = url
    return route


async def test_the_ok_answer_carries_the_upstreams_authorization(swap_gate: Gate) -> None:
    server = TokenExchangeServer().start()
    try:
        for url, expected in (("", "eyJ"), (server.url, "exchanged-1-for-ledger")):
            swap_gate.table.replace([swap_policy("ledger", url)])  # type: ignore[list-item]
            status, headers, _ = await swap_gate.ask(rsa_key().sign(claims()))
            assert status == 200 and headers["x-user-id"] == "user-1"
            assert headers["authorization"].startswith(f"Bearer {expected}")
    finally:
        server.stop()


async def test_no_upstream_token_uses_none_of_the_routes_limits(swap_gate: Gate) -> None:
    per_ip, per_user = limit(0, "ip", 100), limit(1, "user", 100)
    with refused_port() as port:
        swap_gate.table.replace([swap_policy("ledger", f"http://127.0.0.1:{port}/token", per_ip, per_user)])  # type: ignore[list-item]
        for _ in range(3):
            status, headers, body = await swap_gate.ask(rsa_key().sign(claims()))
            assert (status, headers["x-gatehouse-upstream-token"], headers["retry-after"]) == (424, "unavailable", "1")
            assert b'"reason":"connection"' in body
    assert swap_gate.count(per_ip, f"remote_address={PEER}") == 0
    assert swap_gate.count(per_user, USER_1) == 0
    swap_gate.table.replace([swap_policy("ledger", "", per_ip, per_user)])  # type: ignore[list-item]
    assert (await swap_gate.ask(rsa_key().sign(claims())))[0] == 200
    assert (swap_gate.count(per_ip, f"remote_address={PEER}"), swap_gate.count(per_user, USER_1)) == (1, 1), "a served one counts"


async def test_an_exchange_slower_than_its_timeout_is_the_documented_424_in_time(swap_gate: Gate) -> None:
    """The endpoint answers after 3 s, the exchange's timeout is 1 s: the check gives up at
    the timeout (never waits for the endpoint), answers unavailable with reason timeout,
    and caches nothing, so the next request asks again."""
    server = TokenExchangeServer(delay=3.0).start()
    try:
        swap_gate.table.replace([swap_policy("ledger", server.url)])  # type: ignore[list-item]
        token = rsa_key().sign(claims())
        for attempt in (1, 2):
            started = time.monotonic()
            status, headers, body = await swap_gate.ask(token)
            took = time.monotonic() - started
            assert (status, headers["x-gatehouse-upstream-token"], headers["retry-after"]) == (424, "unavailable", "1")
            assert b'"reason":"timeout"' in body and token.encode() not in body
            assert 0.9 <= took < 2.5, f"answered after {took:.2f} s with a 1 s exchange timeout"
            assert len(server.requests) == attempt, "a timed-out exchange is not cached"
    finally:
        server.stop()
