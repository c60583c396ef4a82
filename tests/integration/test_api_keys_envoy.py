"""API keys through real Envoy, two ext_authz processes, Redis and the control plane:
``gatehouse apikey create`` → the key works on every instance → ``revoke`` refuses it
everywhere within 1 s; ``user`` limits count per consumer; wrong and missing keys get 401;
consumers allow/deny; the key wins over a token, neither gets both challenges; a Redis outage
fails key checks closed and recovers; the key is
stored only as its hash and never reaches the upstream, a response or a log.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis as redis_client

from tests.harness.ext_authz import ExtAuthzProcess
from tests.harness.gateway import GatewayStack
from tests.harness.http_client import wait_for
from tests.harness.issuer import TestIssuer
from tests.harness.redis import RedisServer
from tests.harness.route_repo import route_doc
from tests.harness.window_clock import settle
from tests.integration.conftest import StackFactory, ext_authz_entry
from tests.integration.test_authz import bearer, issuer_config

pytestmark = pytest.mark.redis

BACKEND = [{"service": "svc-a", "port": 8080}]
ROUTES = [
    route_doc(
        "partners",
        {
            "match": {"pathPrefix": "/partners"},
            "backends": BACKEND,
            "auth": {"apiKeys": True, "jwt": False, "consumers": {"deny": ["partner-c"]}},
            "rateLimits": [{"key": "user", "algorithm": "fixedWindow", "limit": 3, "window": "1h"}],
        },
    ),
    route_doc(
        "orders",
        {"match": {"pathPrefix": "/orders"}, "backends": BACKEND, "auth": {"apiKeys": True, "scopes": ["orders:read"]}},
    ),
    route_doc("public", {"match": {"pathPrefix": "/public"}, "backends": BACKEND, "auth": {"required": False}}),
]
KEY_CHALLENGE = 'ApiKey realm="gatehouse", header="x-api-key"'


@dataclass
class KeyStack:
    gateway: GatewayStack
    services: list[ExtAuthzProcess]
    redis: RedisServer
    issuer: TestIssuer
    directory: Path

    def apikey(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "gatehouse", "apikey", *args, "--redis-url", self.redis.url]
        return subprocess.run(argv, capture_output=True, text=True, timeout=30)

    def create(self, consumer: str) -> tuple[str, str]:
        """(key id, key) from the CLI."""
        result = self.apikey("create", "--consumer", consumer, "--reason", "test")
        assert result.returncode == 0, result.stderr
        key = result.stdout.strip()
        assert key.startswith("ghk_") and "\n" not in key
        return key.split("_")[1], key

    def wait_accepted(self, key: str, path: str = "/orders/1") -> None:
        """Every instance has the key (pub/sub): ten 200s in a row (the checks alternate),
        on a route with no limit."""
        client = self.gateway.client()
        last: list[Any] = []

        def accepted() -> bool:
            last[:] = [client.request(path, headers={"x-api-key": key}) for _ in range(10)]
            return all(reply.status == 200 for reply in last)

        try:
            wait_for(accepted, 5, "the new key accepted on every instance", interval=0.02)
        except AssertionError:
            raise AssertionError(f"{[(r.status, r.body[:200]) for r in last]}") from None


@pytest.fixture
def stack(make_stack: StackFactory, tmp_path: Path, redis: RedisServer, refused_address: str) -> Iterator[KeyStack]:
    issuer = TestIssuer()
    config: dict[str, Any] = {
        "issuers": [issuer_config(issuer, {"jwksFile": str(issuer.write_jwks(tmp_path / "jwks.json"))})],
        "revocation": {"redisUrl": redis.url, "resyncInterval": "2s"},
    }
    rate_limit = {"redis": {"url": redis.url, "timeout": "200ms"}, "expectedInstances": 2}
    services = [
        ExtAuthzProcess(tmp_path / "authz", config, name=f"ext-authz-{i}", transport="http", rate_limit=rate_limit)
        for i in range(2)
    ]
    # The check decides these routes' limits; ratelimit_svc is never called for them.
    gateway = make_stack(control_plane_extra={"extAuthz": ext_authz_entry(services), "rateLimit": {"address": refused_address}})
    gateway.commit_routes({"routes.yaml": ROUTES})
    gateway.start(wait_path="/public")
    for service in services:
        service.use_control_plane(gateway.control_plane.xds_port)
        service.start()
    try:
        yield KeyStack(gateway, services, redis, issuer, tmp_path)
    finally:
        for service in services:
            service.stop()


def test_a_key_is_created_used_on_both_instances_and_revoked_everywhere_within_a_second(stack: KeyStack) -> None:
    key_id, key = stack.create("partner-a")
    stack.wait_accepted(key)
    for service in stack.services:
        assert service.metric("gatehouse_authz_decisions_total", result="allow", reason="ok") > 0, f"{service.name} saw no check"

    reply = stack.gateway.get("/orders/1", headers={"x-api-key": key, "x-consumer": "root", "x-user-id": "root"})
    assert reply.status == 200
    seen = reply.json()["headers"]
    assert (seen["x-user-id"], seen["x-consumer"]) == ("partner-a", "partner-a"), "the consumer, not the client's copies"
    assert "x-api-key" not in seen, "the key never reaches the upstream"
    assert key not in reply.body.decode() and key not in str(reply.headers)

    # Redis holds the hash, never the key.
    with redis_client.Redis.from_url(stack.redis.url) as client:
        stored = client.get(f"gatehouse:apikey:{key_id}")
        dump = b"".join(client.dump(name) or b"" for name in client.scan_iter("*"))
    assert stored is not None and hashlib.sha256(key.encode()).hexdigest().encode() in stored
    assert key.encode() not in stored and key.encode() not in dump
    listed = stack.apikey("list")
    assert listed.returncode == 0 and key_id in listed.stdout and "partner-a" in listed.stdout
    assert key not in listed.stdout and key.rsplit("_", 1)[1] not in listed.stdout

    revoked = stack.apikey("revoke", "--id", key_id, "--reason", "rotated")
    assert revoked.returncode == 0, revoked.stderr
    assert '"kind": "apikey.revoked"' in revoked.stderr and '"subject": "partner-a"' in revoked.stderr
    revoked_at = time.monotonic()
    client = stack.gateway.client()

    def all_refused() -> bool:
        return all(client.request("/partners/x", headers={"x-api-key": key}).status == 401 for _ in range(10))

    took = wait_for(all_refused, 5, "the revoked key refused on every instance", interval=0.01)
    assert took < 1.0, f"revocation took {took:.2f}s to reach every instance"
    print(f"\nkey revocation refused everywhere after {(time.monotonic() - revoked_at) * 1000:.0f} ms")
    assert client.request("/partners/x", headers={"x-api-key": key}).json()["error"]["reason"] == "unknown_key"
    assert key_id not in stack.apikey("list").stdout
    again = stack.apikey("revoke", "--id", key_id)
    assert again.returncode == 2 and f"no key with id {key_id}" in again.stderr


def test_limits_count_per_consumer_and_bad_keys_get_401(stack: KeyStack) -> None:
    _, key_a = stack.create("partner-a")
    _, key_b = stack.create("partner-b")
    _, key_c = stack.create("partner-c")
    stack.wait_accepted(key_b)
    client = stack.gateway.client()

    settle(3600, 5)  # partner-a's hits in one fixed window
    statuses = [client.request("/partners/x", headers={"x-api-key": key_a}).status for _ in range(4)]
    assert statuses == [200, 200, 200, 429], "partner-a's 3 an hour, across both instances"
    denied = client.request("/partners/x", headers={"x-api-key": key_a})
    assert denied.json()["error"]["code"] == "rate_limited" and denied.headers["x-ratelimit-limit"] == "3"
    assert client.request("/partners/x", headers={"x-api-key": key_b}).status == 200, "another consumer has its own count"

    forbidden = client.request("/partners/x", headers={"x-api-key": key_c})
    assert (forbidden.status, forbidden.json()["error"]["reason"]) == (403, "consumer")

    wrong = key_b[:-2] + ("AA" if not key_b.endswith("AA") else "BB")
    for headers, reason in [({"x-api-key": wrong}, "unknown_key"), ({}, "missing_key"), ({"x-api-key": "guess"}, "malformed_key")]:
        reply = client.request("/partners/x", headers=headers)
        assert (reply.status, reply.json()["error"]["reason"]) == (401, reason), headers
        assert reply.headers["www-authenticate"] == KEY_CHALLENGE
        assert reply.upstream is None

    # Keys beside tokens: the key decides when both come; neither names both schemes.
    token = stack.issuer.token("alice", scope="orders:read")
    assert client.request("/orders/1", headers=bearer(token)).json()["headers"]["x-user-id"] == "alice"
    both = client.request("/orders/1", headers={**bearer(token), "x-api-key": key_b})
    assert both.json()["headers"]["x-user-id"] == "partner-b"
    neither = client.request("/orders/1")
    assert neither.status == 401
    assert neither.headers["www-authenticate"].startswith('Bearer realm="gatehouse"')
    assert neither.headers["www-authenticate"].endswith(KEY_CHALLENGE)

    # No key in any log of any process of the stack (ext_authz at debug, Envoy, the control plane, Redis).
    for path in stack.directory.rglob("*"):
        if path.is_file() and path.stat().st_size < 50_000_000:
            text = path.read_bytes()
            for key in (key_a, key_b, key_c, wrong):
                assert key.encode() not in text, f"a key in {path}"


def test_a_redis_outage_fails_key_checks_closed_and_they_recover_without_restart(stack: KeyStack) -> None:
    """``revocation.onUnavailable: closed`` (the default) holds for keys as for tokens: once
    the mirror cannot vouch for its keys it answers 503 (the client sees the gateway's own
    503). Redis is the keys' source of truth: this test Redis comes back empty, so the key is
    refused (401), and once the record is restored (as from Redis persistence) it works
    again, with no restart of anything."""
    key_id, key = stack.create("partner-a")
    stack.wait_accepted(key)
    with redis_client.Redis.from_url(stack.redis.url) as client:
        record = client.get(f"gatehouse:apikey:{key_id}")
    assert record is not None
    gateway = stack.gateway.client()
    stack.redis.kill()
    wait_for(lambda: gateway.request("/orders/1", headers={"x-api-key": key}).status == 503, 15, "503 while Redis is down")
    assert gateway.request("/orders/1", headers={"x-api-key": key}).json()["error"]["code"] == "authorization_unavailable"
    assert any(s.metric("gatehouse_authz_decisions_total", result="deny", reason="revocation_unavailable") >= 1 for s in stack.services)

    stack.redis.restart()  # empty: the store lost the key, and the mirrors follow the store
    wait_for(lambda: gateway.request("/orders/1", headers={"x-api-key": key}).status == 401, 20, "the lost key refused")
    with redis_client.Redis.from_url(stack.redis.url) as client:
        client.set(f"gatehouse:apikey:{key_id}", record)  # restored; the mirrors' next resync (2s) finds it
    wait_for(lambda: gateway.request("/orders/1", headers={"x-api-key": key}).status == 200, 20, "the restored key accepted")
