"""Rate limits through real Envoy, ratelimit_svc, the control plane and Redis."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.harness.ext_authz import ExtAuthzProcess
from tests.harness.gateway import GatewayStack
from tests.harness.http_client import Load, wait_for
from tests.harness.issuer import TestIssuer
from tests.harness.ratelimit import RateLimitServiceProcess
from tests.harness.redis import RedisServer
from tests.harness.route_repo import route_doc
from tests.harness.window_clock import settle
from tests.integration.conftest import StackFactory, ext_authz_entry


def limited(name: str, path: str, limits: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return route_doc(
        name,
        {"match": {"pathPrefix": path}, "backends": [{"service": "svc-a", "port": 8080}], "rateLimits": limits,
         "auth": {"required": False}, **spec},
    )


class Stack:
    def __init__(self, gateway: GatewayStack, ratelimit: RateLimitServiceProcess, authz: ExtAuthzProcess | None) -> None:
        self.gateway, self.ratelimit, self.authz = gateway, ratelimit, authz

    def stop(self) -> None:
        self.ratelimit.stop()
        if self.authz is not None:
            self.authz.stop()


@pytest.fixture(params=["ratelimit_svc", "ext_authz"])
def public_limits(request: pytest.FixtureRequest) -> str:
    """Who decides a public route's limits: the RateLimitService (gRPC), or the lean HTTP
    check with no token (``extAuthz.publicRouteLimits``, the default over HTTP)."""
    value: str = request.param
    return value


def start(make_stack: StackFactory, tmp_path: Path, redis: RedisServer, routes: list[dict[str, Any]], *,
          issuer: TestIssuer | None = None, extra: dict[str, Any] | None = None, transport: str = "http",
          public_limits: str = "ratelimit_svc", fail_closed: bool = False) -> Stack:
    """With ``issuer`` (or ``public_limits="ext_authz"``), ext_authz too: over HTTP it decides
    authenticated routes' limits itself (on the same Redis), over gRPC ratelimit_svc does,
    in a second call; public routes' limits go to it only with ``public_limits``."""
    ratelimit = RateLimitServiceProcess(tmp_path / "rl", redis_url=redis.url, extra=extra)
    authz = None
    control_plane: dict[str, Any] = {"rateLimit": {"address": ratelimit.address, "timeout": "200ms", "failClosed": fail_closed}}
    if public_limits == "ext_authz":
        issuer = issuer or TestIssuer()
    if issuer is not None:
        jwks = str(issuer.write_jwks(tmp_path / "jwks.json"))
        authz = ExtAuthzProcess(
            tmp_path / "authz", {"issuers": [{"issuer": issuer.issuer, "audiences": [issuer.audience], "jwksFile": jwks}]},
            transport=transport, rate_limit={"redis": {"url": redis.url, "timeout": "200ms"}, **(extra or {})},
        )
        control_plane["extAuthz"] = {**ext_authz_entry([authz]), "publicRouteLimits": public_limits == "ext_authz"}
        if public_limits == "ext_authz":
            control_plane["extAuthz"]["forwardHeaders"] = ["x-probe"]  # a header: key the check must see
    gateway = make_stack(control_plane_extra=control_plane)
    gateway.commit_routes({"routes.yaml": routes})
    gateway.start()
    ratelimit.start(gateway.control_plane.xds_port)
    if authz is not None:
        authz.use_control_plane(gateway.control_plane.xds_port)
        authz.start()
    return Stack(gateway, ratelimit, authz)


def headers_of(reply: Any) -> tuple[str, str, str, str | None]:
    h = reply.headers
    return h.get("x-ratelimit-limit"), h.get("x-ratelimit-remaining"), h.get("x-ratelimit-reset"), h.get("retry-after")


def only_through(stack: Stack, public_limits: str) -> None:
    """With the HTTP check deciding, stop ratelimit_svc: the limits must hold without it."""
    if public_limits == "ext_authz":
        stack.ratelimit.stop()


def test_over_the_limit_is_429_with_consistent_headers(make_stack: StackFactory, tmp_path: Path, redis: RedisServer, public_limits: str) -> None:
    stack = start(make_stack, tmp_path, redis, [limited("orders", "/orders", [{"key": "ip", "algorithm": "fixedWindow", "limit": 5, "window": "20s"}])],
                  public_limits=public_limits)
    try:
        only_through(stack, public_limits)
        gw = stack.gateway
        client = gw.client()
        settle(20, 6)  # every hit below in one fixed window
        wait_for(lambda: client.request("/orders").headers.get("x-ratelimit-limit") == "5", 10, "rate-limit headers on /orders")
        replies = [client.request("/orders") for _ in range(10)]
        statuses = [r.status for r in replies]
        assert 200 in statuses and statuses[-1] == 429, statuses
        first_denied = statuses.index(429)
        assert all(s == 429 for s in statuses[first_denied:])
        allowed = replies[first_denied - 1]
        limit, remaining, reset, retry = headers_of(allowed)
        assert (limit, remaining, retry) == ("5", "0", None)
        assert 0 < int(reset) <= 20
        limit, remaining, reset, retry = headers_of(replies[-1])
        assert (limit, remaining) == ("5", "0")
        assert retry is not None and retry == reset and 1 <= int(retry) <= 20
        assert replies[-1].upstream is None, "a denied request never reaches the upstream"
        assert "x-envoy-ratelimited" not in replies[-1].headers
        assert replies[-1].json()["error"]["code"] == "rate_limited"
        assert "x-gatehouse-route" not in replies[0].json()["headers"], "the route's name was for the check only"
    finally:
        stack.stop()


def test_two_limits_on_one_route_are_both_enforced(make_stack: StackFactory, tmp_path: Path, redis: RedisServer, transport: str) -> None:
    issuer = TestIssuer()
    routes = [
        route_doc(
            "orders",
            {
                "match": {"pathPrefix": "/orders"},
                "backends": [{"service": "svc-a", "port": 8080}],
                "rateLimits": [
                    {"key": "user", "algorithm": "fixedWindow", "limit": 3, "window": "30s"},
                    {"key": "ip", "algorithm": "fixedWindow", "limit": 5, "window": "30s"},
                ],
            },
        )
    ]
    stack = start(make_stack, tmp_path, redis, routes, issuer=issuer, transport=transport)
    try:
        gw = stack.gateway
        alice = {"authorization": f"Bearer {issuer.token('alice')}"}
        bob = {"authorization": f"Bearer {issuer.token('bob')}"}
        settle(30, 6)  # every hit below in one fixed window
        wait_for(lambda: gw.get("/orders", headers=alice).headers.get("x-ratelimit-limit") is not None, 10, "limits in force")
        # alice has used 1 of 3 (and 1 of the ip's 5).
        assert [gw.get("/orders", headers=alice).status for _ in range(3)] == [200, 200, 429], "the user limit"
        # bob has user quota left, but the shared ip has 5 - 3 = 2 left.
        assert [gw.get("/orders", headers=bob).status for _ in range(3)] == [200, 200, 429], "the ip limit"
        denied = gw.get("/orders", headers=bob)
        assert denied.headers["x-ratelimit-limit"] == "5"
    finally:
        stack.stop()


def test_a_limit_change_in_git_applies_without_restart(make_stack: StackFactory, tmp_path: Path, redis: RedisServer, public_limits: str) -> None:
    stack = start(make_stack, tmp_path, redis, [limited("orders", "/orders", [{"key": "ip", "limit": 50, "window": "60s"}])],
                  public_limits=public_limits)
    try:
        only_through(stack, public_limits)
        gw = stack.gateway
        decider = stack.authz if stack.authz is not None else stack.ratelimit
        pid = decider.process.pid if decider.process else None
        wait_for(lambda: gw.get("/orders").headers.get("x-ratelimit-limit") == "50", 10, "limit 50")
        gw.commit_routes({"routes.yaml": [limited("orders", "/orders", [{"key": "ip", "limit": 3, "window": "60s"}])]}, "tighten")
        gw.control_plane.sync()
        wait_for(lambda: gw.get("/orders").headers.get("x-ratelimit-limit") == "3", 10, "limit 3 in force")
        assert decider.process is not None and decider.process.pid == pid and decider.process.alive()
        statuses = [gw.get("/orders").status for _ in range(5)]
        assert statuses[-1] == 429
    finally:
        stack.stop()


@pytest.mark.parametrize("policy", ["local", "open", "closed"])
def test_redis_outage_under_load_follows_on_store_failure(make_stack: StackFactory, tmp_path: Path, redis: RedisServer, policy: str,
                                                         public_limits: str) -> None:
    routes = [limited("orders", "/orders", [{"key": "ip", "algorithm": "fixedWindow", "limit": 100000, "window": "60s", "onStoreFailure": policy},
                                           {"key": "header:x-probe", "algorithm": "fixedWindow", "limit": 4, "window": "60s", "onStoreFailure": policy}])]
    stack = start(make_stack, tmp_path, redis, routes, extra={"expectedInstances": 2}, public_limits=public_limits)
    try:
        only_through(stack, public_limits)
        gw = stack.gateway
        wait_for(lambda: gw.get("/orders").headers.get("x-ratelimit-limit") is not None, 10, "limits in force")
        with Load(gw.listener_port, ["/orders"], workers=3) as load:
            time.sleep(0.3)
            redis.kill()
            time.sleep(1.5)
            # The probe key is limited to 4 globally; locally 4 ÷ 2 instances = 2.
            settle(60, 2)  # the probes in one fixed window
            probes = [gw.get("/orders", headers={"x-probe": "p1"}).status for _ in range(4)]
            time.sleep(0.5)
        statuses = load.report.statuses
        assert not any(500 <= s < 600 for s in statuses), f"no 5xx while Redis is down: {statuses}"
        if policy == "local":
            assert statuses[200] > 0 and probes == [200, 200, 429, 429], probes
        elif policy == "open":
            assert statuses[200] > 0 and probes == [200, 200, 200, 200], probes
        else:
            assert 429 in statuses and probes == [429] * 4, probes
        redis.restart()
        # A first hit counted in Redis leaves 3 of 4 (local: 1 of 2; open: 4; closed: 429).
        wait_for(lambda: gw.get("/orders", headers={"x-probe": "p2"}).headers.get("x-ratelimit-remaining") == "3", 15,
                 "global counters back")
        settle(60, 2)
        fresh = [gw.get("/orders", headers={"x-probe": "p3"}) for _ in range(5)]
        assert [r.status for r in fresh] == [200, 200, 200, 200, 429], "the global limit of 4, not a fallback"
        assert [r.headers.get("x-ratelimit-limit") for r in fresh] == ["4"] * 5
    finally:
        stack.stop()


def test_over_http_a_bad_token_is_401_counts_against_the_ip_and_moves_no_users_counter(
    make_stack: StackFactory, tmp_path: Path, redis: RedisServer
) -> None:
    """One call decides token and limits: token guessing from one address is limited, and
    a 401 spends no user's quota; the ratelimit filter is never called for the route."""
    issuer = TestIssuer()
    routes = [
        route_doc(
            "orders",
            {
                "match": {"pathPrefix": "/orders"},
                "backends": [{"service": "svc-a", "port": 8080}],
                "rateLimits": [
                    {"key": "user", "algorithm": "fixedWindow", "limit": 2, "window": "30s"},
                    {"key": "ip", "algorithm": "fixedWindow", "limit": 4, "window": "30s"},
                ],
            },
        )
    ]
    stack = start(make_stack, tmp_path, redis, routes, issuer=issuer, transport="http")
    try:
        gw = stack.gateway
        alice = {"authorization": f"Bearer {issuer.token('alice')}"}
        settle(30, 5)  # every hit below in one fixed window
        first = gw.get("/orders", headers=alice)
        assert first.status == 200 and (first.headers["x-ratelimit-limit"], first.headers["x-ratelimit-remaining"]) == ("2", "1")
        guesses = [gw.get("/orders", headers={"authorization": "Bearer guess.guess.guess"}).status for _ in range(4)]
        assert guesses == [401, 401, 401, 429], "the per-IP limit counts the guesses: 1 + 3 of 4, then 429"
        # alice's own quota did not move: the limit that now denies her is the IP's.
        denied = gw.get("/orders", headers=alice)
        assert denied.status == 429 and denied.headers["x-ratelimit-limit"] == "4" and denied.headers["retry-after"]
        assert denied.json()["error"]["code"] == "rate_limited"
        assert stack.ratelimit.metric("gatehouse_ratelimit_hits_total") == 0, "Envoy never called ratelimit_svc"
    finally:
        stack.stop()


@pytest.mark.parametrize("fail_closed", [False, True])
def test_public_limits_in_the_http_check_follow_the_rate_limit_failure_policy_when_it_is_down(
    make_stack: StackFactory, tmp_path: Path, redis: RedisServer, fail_closed: bool
) -> None:
    """Moving a public route's limits into the HTTP check changes no outcome when the
    service is down: the route follows ``rateLimit.failClosed`` (through), as with
    ratelimit_svc (false: let through; true: 500), while an authenticated route still
    fails closed with 503 (``extAuthz.failOpen: false``)."""
    issuer = TestIssuer()
    routes = [
        limited("quotes", "/quotes", [{"key": "ip", "algorithm": "fixedWindow", "limit": 100, "window": "60s"}]),
        route_doc("orders", {"match": {"pathPrefix": "/orders"}, "backends": [{"service": "svc-a", "port": 8080}]}),
    ]
    stack = start(make_stack, tmp_path, redis, routes, issuer=issuer, public_limits="ext_authz", fail_closed=fail_closed)
    try:
        only_through(stack, "ext_authz")
        gw = stack.gateway
        token = {"authorization": f"Bearer {issuer.token('alice')}"}
        wait_for(lambda: gw.get("/quotes").headers.get("x-ratelimit-limit") == "100", 10, "the check decides /quotes")
        assert gw.get("/orders", headers=token).status == 200
        assert stack.authz is not None
        stack.authz.stop()
        quotes = gw.get("/quotes")
        if fail_closed:
            assert quotes.status == 500 and quotes.upstream is None, (quotes.status, quotes.body)
        else:
            assert quotes.status == 200 and quotes.upstream == "svc-a", (quotes.status, quotes.body)
            assert "x-ratelimit-limit" not in quotes.headers
        assert gw.get("/orders", headers=token).status == 503, "an authenticated route still fails closed"
    finally:
        stack.stop()
