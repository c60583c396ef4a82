"""Identities never collide across issuers, API keys and routes (issue 33, item 3), through
real Envoy, ext_authz, the control plane and Redis.

Two trusted issuers, A and B, both with a user ``123``, and an API-key consumer named ``123``:

- a route naming issuer A (``auth.issuers``) refuses B's valid token (401
  ``issuer_not_accepted``), over both transports; a route naming none takes both;
- ``x-user-id`` stays the bare id (what upstreams read), ``x-principal`` names the source,
  and a client's ``x-principal`` never reaches the upstream;
- ``user`` limits count per principal: A's ``123``, B's ``123`` and the consumer ``123``
  each have their own count (in the HTTP check, and in ratelimit_svc over gRPC);
- ``varyByUser`` cache entries are per principal: B's ``123`` never gets A's answer;
- with ``extAuthz.requireAudience`` a route reading tokens with no audiences is refused
  (not served) while its neighbours are.

Routes sit in separate files, so a file today's main refuses does not take the others down.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.harness.ext_authz import ExtAuthzProcess
from tests.harness.gateway import GatewayStack
from tests.harness.http_client import wait_for
from tests.harness.issuer import TestIssuer
from tests.harness.ratelimit import RateLimitServiceProcess
from tests.harness.redis import RedisServer
from tests.harness.route_repo import route_doc
from tests.harness.window_clock import settle
from tests.integration.conftest import StackFactory, ext_authz_entry
from tests.integration.test_authz import bearer
from tests.integration.test_fail_closed_envoy import route_row
from tests.integration.test_route_shields_envoy import served

pytestmark = pytest.mark.redis

BACKEND = [{"service": "svc-a", "port": 8080}]
ISSUER_A = "https://issuer-a.test/"
ISSUER_B = "https://issuer-b.test/"
MINE = route_doc("mine", {"match": {"pathPrefix": "/mine"}, "backends": BACKEND,
                          "auth": {"audiences": ["api"]}, "cache": {"ttl": "60s", "varyByUser": True}})
"""Added by the cache test alone."""
USER_LIMIT = [{"key": "user", "algorithm": "fixedWindow", "limit": 2, "window": "1h"}]


def routes(transport: str) -> dict[str, list[dict[str, Any]] | str]:
    """One route per file (see the module docstring). API keys are the HTTP check's only."""
    keys: dict[str, Any] = {"apiKeys": True} if transport == "http" else {}
    return {
        "a-only.yaml": [route_doc("a-only", {"match": {"pathPrefix": "/a"}, "backends": BACKEND,
                                             "auth": {"issuers": [ISSUER_A], "audiences": ["api"]}})],
        "both.yaml": [route_doc("both", {"match": {"pathPrefix": "/both"}, "backends": BACKEND,
                                         "auth": {"audiences": ["api"], **keys}, "rateLimits": USER_LIMIT})],
        **({"keyed.yaml": [route_doc("keyed", {"match": {"pathPrefix": "/keyed"}, "backends": BACKEND,
                                               "auth": {"apiKeys": True, "jwt": False}})]} if keys else {}),
        "public.yaml": [route_doc("public", {"match": {"pathPrefix": "/public"}, "backends": BACKEND, "auth": {"required": False}})],
    }


@dataclass
class Principals:
    gateway: GatewayStack
    authz: ExtAuthzProcess
    ratelimit: RateLimitServiceProcess | None
    redis: RedisServer
    a: TestIssuer
    b: TestIssuer
    transport: str

    def key(self, consumer: str) -> str:
        """A new API key for ``consumer`` (the CLI), once the check has it."""
        argv = [sys.executable, "-m", "gatehouse", "apikey", "create", "--consumer", consumer, "--reason", "test",
                "--redis-url", self.redis.url]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, result.stderr
        key = result.stdout.strip()
        wait_for(lambda: self.gateway.get("/keyed/ready", headers={"x-api-key": key}).status == 200, 5, "the key accepted")
        return key


def _issuer(issuer: TestIssuer, directory: Path, name: str) -> dict[str, Any]:
    jwks = str(issuer.write_jwks(directory / f"{name}.json"))
    return {"issuer": issuer.issuer, "audiences": [issuer.audience], "jwksFile": jwks}


@pytest.fixture
def principals(make_stack: StackFactory, tmp_path: Path, redis: RedisServer, transport: str) -> Iterator[Principals]:
    """Issuers A and B, API keys, user limits: over HTTP the check decides them, over gRPC ratelimit_svc."""
    a, b = TestIssuer(ISSUER_A), TestIssuer(ISSUER_B)
    tmp_path.mkdir(exist_ok=True)
    config: dict[str, Any] = {
        "issuers": [_issuer(a, tmp_path, "a"), _issuer(b, tmp_path, "b")],
        "revocation": {"redisUrl": redis.url, "resyncInterval": "2s"},
    }
    rate_limit = {"redis": {"url": redis.url, "timeout": "200ms"}}
    authz = ExtAuthzProcess(tmp_path / "authz", config, transport=transport, rate_limit=rate_limit)
    ratelimit = RateLimitServiceProcess(tmp_path / "rl", redis_url=redis.url) if transport == "grpc" else None
    control_plane: dict[str, Any] = {"extAuthz": ext_authz_entry([authz])}
    control_plane["rateLimit"] = {"address": ratelimit.address if ratelimit else "127.0.0.1:1", "timeout": "200ms"}
    gateway = make_stack(control_plane_extra=control_plane)
    gateway.commit_routes(routes(transport))
    gateway.start(wait_path="/public")
    if ratelimit is not None:
        ratelimit.start(gateway.control_plane.xds_port)
    authz.use_control_plane(gateway.control_plane.xds_port)
    authz.start()
    try:
        yield Principals(gateway, authz, ratelimit, redis, a, b, transport)
    finally:
        authz.stop()
        if ratelimit is not None:
            ratelimit.stop()


def test_a_route_naming_issuer_a_refuses_issuer_b_and_principals_carry_their_source(principals: Principals) -> None:
    stack = principals.gateway
    from_a, from_b = bearer(principals.a.token("123")), bearer(principals.b.token("123"))
    wait_for(lambda: stack.get("/a/1", headers=from_a).status == 200, 20, "the route naming issuer A answering A's token")

    refused = stack.get("/a/1", headers=from_b)
    assert refused.status == 401, refused.body
    assert refused.json()["error"]["reason"] == "issuer_not_accepted"
    assert refused.upstream is None, "B's token never reaches the upstream of A's route"
    assert refused.headers["www-authenticate"].startswith('Bearer realm="gatehouse", error="invalid_token"')

    # A route naming no issuer takes both; the upstream tells them apart by x-principal.
    seen_a = stack.get("/both/1", headers={**from_a, "x-principal": "apikey;root"}).json()["headers"]
    seen_b = stack.get("/both/1", headers=from_b).json()["headers"]
    assert seen_a["x-user-id"] == seen_b["x-user-id"] == "123", "x-user-id stays the id its source gave"
    assert seen_a["x-principal"] == "jwt;https://issuer-a.test/;123", "the source's, never the client's copy"
    assert seen_b["x-principal"] == "jwt;https://issuer-b.test/;123"
    # A's route still serves A; a public route gets no principal, even one a client sends.
    assert stack.get("/a/1", headers=from_a).json()["headers"]["x-principal"] == "jwt;https://issuer-a.test/;123"
    assert "x-principal" not in stack.get("/public/x", headers={"x-principal": "jwt;x;123"}).json()["headers"]


def test_user_limits_count_per_principal_never_per_bare_id(principals: Principals) -> None:
    stack = principals.gateway
    from_a, from_b = bearer(principals.a.token("123")), bearer(principals.b.token("123"))
    wait_for(lambda: stack.get("/a/1", headers=from_a).status == 200, 20, "the check serving")
    key = principals.key("123") if principals.transport == "http" else None
    settle(3600, 10)  # every hit below in one fixed window
    assert [stack.get("/both/1", headers=from_a).status for _ in range(3)] == [200, 200, 429], "A's 123: two an hour"
    assert stack.get("/both/1", headers=from_b).status == 200, "B's 123 has a count of its own"
    # Each still meets its own limit: what made them apart is not a limit switched off.
    assert [stack.get("/both/1", headers=from_b).status for _ in range(2)] == [200, 429]
    if key is not None:
        reply = stack.get("/both/1", headers={"x-api-key": key})
        assert reply.status == 200, "the consumer 123 has a count of its own"
        assert (reply.json()["headers"]["x-principal"], reply.json()["headers"]["x-user-id"]) == ("apikey;123", "123")
        assert [stack.get("/both/1", headers={"x-api-key": key}).status for _ in range(2)] == [200, 429]


@pytest.mark.parametrize("transport", ["http"])
def test_vary_by_user_entries_are_per_principal(principals: Principals) -> None:
    stack = principals.gateway
    from_a, from_b = bearer(principals.a.token("123")), bearer(principals.b.token("123"))
    stack.commit_routes({**routes("http"), "mine.yaml": [MINE]}, "a cached route")
    wait_for(lambda: stack.get("/mine/ready", headers=from_a).status == 200, 20, "the cached route answering A's 123")
    upstream = stack.upstreams["svc-a"]
    before = served(upstream)
    first = stack.get("/mine/profile?x=1", headers=from_a)
    again = stack.get("/mine/profile?x=1", headers=from_a)
    assert first.status == again.status == 200 and "age" in again.headers, "A's 123's second GET is a cache hit"
    assert served(upstream) - before == 1
    theirs = stack.get("/mine/profile?x=1", headers=from_b)
    assert theirs.status == 200 and "age" not in theirs.headers, "B's 123 is never answered with A's 123's entry"
    assert theirs.json()["headers"]["x-principal"] == "jwt;https://issuer-b.test/;123"
    assert served(upstream) - before == 2


def test_with_require_audience_a_token_route_without_audiences_is_refused(make_stack: StackFactory, tmp_path: Path) -> None:
    issuer = TestIssuer(ISSUER_A)
    authz = ExtAuthzProcess(tmp_path / "authz", {"issuers": [_issuer(issuer, tmp_path, "a")]}, transport="http")
    stack = make_stack(control_plane_extra={"extAuthz": {**ext_authz_entry([authz]), "requireAudience": True}})
    try:
        stack.commit_routes({
            "open.yaml": [route_doc("open", {"match": {"pathPrefix": "/open"}, "backends": BACKEND, "auth": {"scopes": ["s"]}})],
            "named.yaml": [route_doc("named", {"match": {"pathPrefix": "/named"}, "backends": BACKEND, "auth": {"audiences": ["api"]}})],
            "public.yaml": [route_doc("public", {"match": {"pathPrefix": "/public"}, "backends": BACKEND, "auth": {"required": False}})],
        })
        stack.start(wait_path="/public")
        authz.use_control_plane(stack.control_plane.xds_port)
        authz.start()
        token = bearer(issuer.token("123", scope="s"))
        wait_for(lambda: stack.get("/named/1", headers=token).status == 200, 20, "the route with audiences served")
        refused = stack.get("/open/1", headers=token)
        assert refused.status == 404 and refused.upstream is None, "the route without audiences is not served"
        row = route_row(stack, "default/open")["accepted"]
        assert (row["status"], row["reason"]) == ("False", "Unenforceable")
        assert row["message"].startswith("auth.audiences: the route reads tokens and names no audience"), row
        assert route_row(stack, "default/named")["accepted"]["status"] == "True"
    finally:
        authz.stop()
