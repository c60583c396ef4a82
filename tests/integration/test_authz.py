"""Authentication through real Envoy, ext_authz and Redis."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jwt
import pytest

from tests.harness.ext_authz import ExtAuthzProcess
from tests.harness.gateway import GatewayStack
from tests.harness.http_client import wait_for
from tests.harness.issuer import JwksServer, TestIssuer, forge_signature
from tests.harness.redis import RedisServer
from tests.harness.route_repo import route_doc
from tests.integration.conftest import StackFactory, ext_authz_entry

ROUTES = [
    route_doc(
        "orders",
        {
            "match": {"pathPrefix": "/orders"},
            "backends": [{"service": "svc-a", "port": 8080}],
            "auth": {"scopes": ["orders:read"]},
        },
    ),
    route_doc("admin", {"match": {"pathPrefix": "/admin"}, "backends": [{"service": "svc-a", "port": 8080}], "auth": {"roles": ["admin"]}}),
    route_doc("payments", {"match": {"pathPrefix": "/payments"}, "backends": [{"service": "svc-a", "port": 8080}], "auth": {"maxTokenAge": "5m"}}),
    route_doc("public", {"match": {"pathPrefix": "/public"}, "backends": [{"service": "svc-b", "port": 8080}], "auth": {"required": False}}),
    route_doc(
        "retired",
        {
            "match": {"pathPrefix": "/retired"},
            "disabled": {"status": 410, "body": "gone"},
            "auth": {"scopes": ["orders:read"]},
            "rateLimits": [{"key": "user", "limit": 1, "window": "1h"}],
        },
    ),
]


def issuer_config(issuer: TestIssuer, jwks: dict[str, Any]) -> dict[str, Any]:
    return {"issuer": issuer.issuer, "audiences": [issuer.audience], "requireJti": True, **jwks}


def authz_stack(
    make_stack: StackFactory, tmp_path: Path, issuer: TestIssuer, redis: RedisServer | None, *, instances: int = 1,
    jwks: dict[str, Any] | None = None, policy: str = "closed", transport: str = "http",
) -> tuple[GatewayStack, list[ExtAuthzProcess]]:
    jwks = jwks or {"jwksFile": str(issuer.write_jwks(tmp_path / "jwks.json"))}
    config: dict[str, Any] = {"issuers": [issuer_config(issuer, jwks)]}
    if redis is not None:
        config["revocation"] = {"redisUrl": redis.url, "onUnavailable": policy, "resyncInterval": "2s"}
    services = [ExtAuthzProcess(tmp_path / "authz", config, name=f"ext-authz-{i}", transport=transport) for i in range(instances)]
    stack = make_stack(control_plane_extra={"extAuthz": ext_authz_entry(services)})
    stack.commit_routes({"routes.yaml": ROUTES})
    stack.start(wait_path="/public")
    for service in services:  # over HTTP each needs the control plane's route table to be ready
        service.use_control_plane(stack.control_plane.xds_port)
        service.start()
    return stack, services


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def test_a_valid_token_reaches_the_upstream_with_identity_headers_and_bad_ones_do_not(make_stack: StackFactory, tmp_path: Path, redis: RedisServer, transport: str) -> None:
    issuer = TestIssuer()
    stack, services = authz_stack(make_stack, tmp_path, issuer, redis, transport=transport)
    try:
        token = issuer.token("alice", scope="orders:read orders:write", role="clerk")
        reply = stack.get("/orders/1", headers=bearer(token))
        assert reply.status == 200, reply.body
        seen = reply.json()["headers"]
        assert (seen["x-user-id"], seen["x-user-role"], seen["x-scope"]) == ("alice", "clerk", "orders:read orders:write")

        missing = stack.get("/orders/1", headers={"x-request-id": "req-123"})
        assert missing.status == 401
        assert missing.headers["www-authenticate"].startswith('Bearer realm="gatehouse", error="invalid_token"')
        body = missing.json()["error"]
        assert (body["code"], body["reason"], body["request_id"]) == ("invalid_token", "missing", "req-123")

        expired = issuer.token("alice", ttl=-120, scope="orders:read")
        reply = stack.get("/orders/1", headers=bearer(expired))
        assert reply.status == 401 and reply.json()["error"]["reason"] == "expired"
        assert expired not in reply.body.decode() and "alice" not in reply.body.decode()

        forged = forge_signature(issuer.token("mallory", scope="orders:read"))
        assert stack.get("/orders/1", headers=bearer(forged)).status == 401

        no_scope = stack.get("/orders/1", headers=bearer(issuer.token("bob", scope="catalog:read")))
        assert no_scope.status == 403
        assert 'error="insufficient_scope"' in no_scope.headers["www-authenticate"]
        assert stack.get("/admin", headers=bearer(issuer.token("bob", role="clerk"))).status == 403
        assert stack.get("/admin", headers=bearer(issuer.token("root", role="admin"))).status == 200
        assert stack.get("/public").status == 200, "public routes call no ext_authz"
    finally:
        for service in services:
            service.stop()


@pytest.mark.parametrize("path", ["/orders/1", "/public/x"])
def test_client_sent_identity_headers_never_reach_the_upstream(make_stack: StackFactory, tmp_path: Path, redis: RedisServer, path: str, transport: str) -> None:
    issuer = TestIssuer()
    stack, services = authz_stack(make_stack, tmp_path, issuer, redis, transport=transport)
    try:
        token = issuer.token("alice", scope="orders:read")
        # Duplicated and oddly cased copies, sent raw so nothing merges them first.
        conn = http.client.HTTPConnection("127.0.0.1", stack.listener_port, timeout=5)
        conn.putrequest("GET", path)
        conn.putheader("Authorization", f"Bearer {token}")
        for name, value in [("X-User-Id", "root"), ("x-user-id", "root2"), ("X-USER-ROLE", "admin"), ("x-Scope", "everything")]:
            conn.putheader(name, value)
        conn.endheaders()
        response = conn.getresponse()
        body = response.read()
        conn.close()
        assert response.status == 200, body
        seen = json.loads(body)["headers"]
        if path.startswith("/public"):
            assert not {"x-user-id", "x-user-role", "x-scope"} & set(seen), seen
        else:
            assert seen["x-user-id"] == "alice" and seen["x-scope"] == "orders:read"
            assert "x-user-role" not in seen, "no role claim: the forged header must be gone, not passed on"
    finally:
        for service in services:
            service.stop()


def test_a_revoked_token_is_refused_within_a_second_on_two_instances(make_stack: StackFactory, tmp_path: Path, redis: RedisServer, transport: str) -> None:
    issuer = TestIssuer()
    stack, services = authz_stack(make_stack, tmp_path, issuer, redis, instances=2, transport=transport)
    try:
        jti = "revoke-me-1"
        token = issuer.token("alice", scope="orders:read", jti=jti)
        client = stack.client()
        for _ in range(20):  # both instances have seen (and cached) the token
            assert client.request("/orders/1", headers=bearer(token)).status == 200
        result = subprocess.run(
            [sys.executable, "-m", "gatehouse", "revoke", "--jti", jti, "--ttl", "1h", "--admin", f"127.0.0.1:{services[0].admin_port}"],
            env=services[0].admin_env(), capture_output=True, text=True, timeout=30,
        )
        assert result.returncode == 0, result.stderr
        revoked_at = time.monotonic()

        def all_refused() -> bool:
            return all(client.request("/orders/1", headers=bearer(token)).status == 401 for _ in range(10))

        took = wait_for(all_refused, 5, "the revoked token refused on every instance", interval=0.01)
        assert took < 1.0, f"revocation took {took:.2f}s to reach every instance"
        reply = client.request("/orders/1", headers=bearer(token))
        assert reply.json()["error"]["reason"] == "revoked"
        assert client.request("/orders/1", headers=bearer(issuer.token("alice", scope="orders:read"))).status == 200
        print(f"\nrevocation refused everywhere after {(time.monotonic() - revoked_at) * 1000:.0f} ms")
    finally:
        for service in services:
            service.stop()


def test_redis_outage_fails_closed_and_recovers_without_restart(make_stack: StackFactory, tmp_path: Path, redis: RedisServer, transport: str) -> None:
    issuer = TestIssuer()
    stack, services = authz_stack(make_stack, tmp_path, issuer, redis, policy="closed", transport=transport)
    try:
        token = issuer.token("alice", scope="orders:read")
        assert stack.get("/orders/1", headers=bearer(token)).status == 200
        redis.kill()
        wait_for(lambda: stack.get("/orders/1", headers=bearer(token)).status == 503, 10, "503 while Redis is down")
        reply = stack.get("/orders/1", headers=bearer(token))
        if transport == "grpc":
            assert reply.json()["error"]["reason"] == "revocation_unavailable"
        else:
            # Envoy's HTTP client takes any 5xx from the service as the service failing:
            # the client gets the gateway's own 503 (status_on_error); the reason is in
            # the service's metrics, log and audit event.
            assert reply.json()["error"]["code"] == "authorization_unavailable"
            assert services[0].metric("gatehouse_authz_decisions_total", result="deny", reason="revocation_unavailable") >= 1
        assert stack.get("/public").status == 200, "public routes do not depend on Redis"
        redis.restart()
        wait_for(lambda: stack.get("/orders/1", headers=bearer(token)).status == 200, 15, "service back with Redis")
    finally:
        for service in services:
            service.stop()


def test_a_jwks_key_rotation_is_picked_up_without_restart(make_stack: StackFactory, tmp_path: Path, redis: RedisServer, transport: str) -> None:
    issuer = TestIssuer()
    jwks = JwksServer(issuer, max_age=3600).start()
    try:
        stack, services = authz_stack(make_stack, tmp_path, issuer, redis, jwks={"jwksUrl": jwks.url, "jwks": {"unknownKidCooldown": "1s"}}, transport=transport)
        try:
            assert stack.get("/orders/1", headers=bearer(issuer.token("alice", scope="orders:read"))).status == 200
            fetches = jwks.fetches
            issuer.rotate()
            rotated = issuer.token("alice", scope="orders:read")
            wait_for(lambda: stack.get("/orders/1", headers=bearer(rotated)).status == 200, 10, "a token signed with the new key")
            assert jwks.fetches >= fetches + 1
            # A flood of unknown kids does not turn into a flood of fetches.
            before = jwks.fetches
            for index in range(50):
                assert stack.get("/orders/1", headers=bearer(_unknown_kid_token(issuer, index))).status == 401
            assert jwks.fetches - before <= 2
        finally:
            for service in services:
                service.stop()
    finally:
        jwks.stop()


def _unknown_kid_token(issuer: TestIssuer, index: int) -> str:
    return jwt.encode(
        {"iss": issuer.issuer, "aud": issuer.audience, "sub": "x", "exp": int(time.time()) + 60, "jti": str(index)},
        issuer.keys[issuer.active_kid],
        algorithm="RS256",
        headers={"kid": f"random-{index}"},
    )


def test_a_disabled_route_that_needs_a_token_checks_it_then_answers_its_status(make_stack: StackFactory, tmp_path: Path, redis: RedisServer, transport: str) -> None:
    """A disabled route is answered by Envoy after the check, on both transports; over HTTP
    it still carries its route header (without it every answer would be a 503), and a
    disabled route spends no limits: its `1 per hour` never turns a request into a 429."""
    issuer = TestIssuer()
    stack, services = authz_stack(make_stack, tmp_path, issuer, redis, transport=transport)
    try:
        assert stack.get("/retired").status == 401
        assert stack.get("/retired", headers=bearer(issuer.token("bob", scope="catalog:read"))).status == 403
        token = issuer.token("alice", scope="orders:read")
        for _ in range(3):
            reply = stack.get("/retired", headers=bearer(token))
            assert (reply.status, reply.body) == (410, b"gone")
    finally:
        for service in services:
            service.stop()


def test_a_client_cannot_choose_the_route_whose_rules_apply(make_stack: StackFactory, tmp_path: Path, redis: RedisServer) -> None:
    """Over HTTP the route is named by x-gatehouse-route: a client's copy (any case, twice)
    is removed, Envoy sets the matched route's own, and the upstream never sees it."""
    issuer = TestIssuer()
    stack, services = authz_stack(make_stack, tmp_path, issuer, redis, transport="http")
    try:
        clerk = issuer.token("bob", role="clerk", scope="orders:read")
        for forged in ("shop/orders", "default/orders", "default/public"):
            conn = http.client.HTTPConnection("127.0.0.1", stack.listener_port, timeout=5)
            conn.putrequest("GET", "/admin")
            conn.putheader("Authorization", f"Bearer {clerk}")
            conn.putheader("X-Gatehouse-Route", forged)  # the clerk would pass orders' rules
            conn.putheader("x-gatehouse-route", forged)
            conn.endheaders()
            response = conn.getresponse()
            body = json.loads(response.read())
            conn.close()
            assert response.status == 403 and body["error"]["reason"] == "role", (forged, body)
        reply = stack.get("/admin", headers={**bearer(issuer.token("root", role="admin")), "x-gatehouse-route": "default/public"})
        assert reply.status == 200
        assert "x-gatehouse-route" not in reply.json()["headers"], "the route's name was for the check, not the upstream"
    finally:
        for service in services:
            service.stop()


def test_a_route_with_max_token_age_takes_a_recent_sign_in_only(make_stack: StackFactory, tmp_path: Path, redis: RedisServer) -> None:
    """auth.maxTokenAge through Envoy: a fresh token passes, one issued 6 minutes ago (still
    unexpired) is 401 token_too_old, and other routes take it."""
    issuer = TestIssuer()
    stack, services = authz_stack(make_stack, tmp_path, issuer, redis, transport="http")
    try:
        assert stack.get("/payments/1", headers=bearer(issuer.token("alice"))).status == 200
        issued = int(time.time()) - 360
        old = issuer.token("alice", iat=issued, nbf=issued, scope="orders:read")
        reply = stack.get("/payments/1", headers=bearer(old))
        assert reply.status == 401 and reply.json()["error"]["reason"] == "token_too_old", reply.body
        assert old not in reply.body.decode()
        assert stack.get("/orders/1", headers=bearer(old)).status == 200, "only the bounded route asks for a recent sign-in"
    finally:
        for service in services:
            service.stop()
