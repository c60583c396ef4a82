"""Fail closed, through real Envoy: a route that asks for protection this gateway cannot
enforce is not served (404), says why on its status (``Accepted=False``,
``Unenforceable``, naming the missing setting), and every other route keeps serving.

One test per check-decided feature whose prerequisite is missing, and the way back: the
same route served with 401/200 once the control plane has an ``extAuthz`` (the control
plane restarted with it; Envoy is not restarted and keeps its config meanwhile).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.ext_authz import ExtAuthzProcess
from tests.harness.gateway import GatewayStack
from tests.harness.http_client import wait_for
from tests.harness.issuer import TestIssuer
from tests.harness.route_repo import route_doc
from tests.integration.conftest import StackFactory, ext_authz_entry

CANARY = route_doc("canary", {"match": {"pathPrefix": "/canary"}, "backends": [{"service": "svc-a", "port": 8080}],
                              "auth": {"required": False}})


def secured(name: str, **spec: Any) -> dict[str, Any]:
    return route_doc(name, {"match": {"pathPrefix": f"/{name}"}, "backends": [{"service": "svc-a", "port": 8080}], **spec})


def route_row(stack: GatewayStack, route_id: str) -> dict[str, Any]:
    code, body = stack.control_plane._request("/status/routes")
    assert code == 200
    rows = {row["route"]: row for row in yaml.safe_load(body)["routes"]}
    assert route_id in rows, sorted(rows)
    return rows[route_id]


def test_an_auth_route_is_not_served_without_a_check_and_is_served_once_one_is_configured(
    make_stack: StackFactory, tmp_path: Path
) -> None:
    """The chart's default (no extAuthz) used to serve `auth` routes to anyone."""
    stack = make_stack(upstreams=("svc-a",))
    stack.commit_routes({"r.yaml": [CANARY, secured("orders", auth={"scopes": ["orders:write"]})]})
    stack.start(wait_path="/canary")
    assert stack.get("/orders/1").status == 404, "never served open"
    assert stack.get("/orders/1", headers={"x-user-id": "alice", "authorization": "Bearer forged"}).status == 404
    row = route_row(stack, "default/orders")
    assert (row["accepted"]["status"], row["accepted"]["reason"]) == ("False", "Unenforceable")
    assert "auth: the route requires a token, and this gateway has no authorization check" in row["accepted"]["message"]
    assert "Helm: extAuthz.enabled=true" in row["accepted"]["message"]
    assert row["programmed"]["reason"] == "NotServing"
    assert "default/orders" in stack.control_plane.status()["quarantined"]
    assert stack.control_plane.metric("gatehouse_routes_refused", reason="Unenforceable") == 1
    assert stack.envoy is not None
    uptime = float(stack.envoy.server_info()["uptime_current_epoch"].rstrip("s"))

    # The operator configures the check: the same route is served with 401/200, Envoy not restarted.
    issuer = TestIssuer()
    authz = ExtAuthzProcess(
        tmp_path / "authz",
        {"issuers": [{"issuer": issuer.issuer, "audiences": [issuer.audience], "jwksFile": str(issuer.write_jwks(tmp_path / "jwks.json")),
                      "requiredClaims": ["exp"]}]},
        transport="http",
    )
    try:
        stack.control_plane.stop()
        config = yaml.safe_load(stack.control_plane.config_path.read_text())
        config["extAuthz"] = ext_authz_entry([authz])
        stack.control_plane.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        stack.control_plane.start()
        authz.use_control_plane(stack.control_plane.xds_port)
        authz.start()
        wait_for(lambda: stack.get("/orders/1").status == 401, 20, "the route served, behind the check")
        writer = issuer.token("alice", scope="orders:write")
        assert stack.get("/orders/1", headers={"authorization": f"Bearer {writer}"}).status == 200
        assert stack.get("/orders/1", headers={"authorization": f"Bearer {issuer.token('bob')}"}).status == 403
        assert route_row(stack, "default/orders")["accepted"]["status"] == "True"
        info = stack.envoy.server_info()
        assert float(info["uptime_current_epoch"].rstrip("s")) > uptime, "the same Envoy, never restarted"
        assert info["command_line_options"]["restart_epoch"] == 0
        assert stack.get("/canary").status == 200
    finally:
        authz.stop()


# (case id, the route's spec, the control plane's extra config, what the refusal names)
REFUSALS = [
    ("auth-jwt", {"auth": {"scopes": ["a"]}}, {}, "auth: the route requires a token, and this gateway has no authorization check"),
    ("auth-api-keys", {"auth": {"apiKeys": True, "jwt": False}}, {}, "auth: the route requires an API key"),
    ("auth-no-audience", {"auth": {"scopes": ["a"]}}, {"extAuthz": {"address": "127.0.0.1:1", "requireAudience": True}},
     "auth.audiences: the route reads tokens and names no audience, and this gateway requires one"),
    ("api-keys-over-grpc", {"auth": {"apiKeys": True}}, {"extAuthz": {"address": "127.0.0.1:1", "protocol": "grpc"}},
     "auth.apiKeys: needs extAuthz.protocol: http"),
    ("api-keys-no-key-store", {"auth": {"apiKeys": True}}, {"extAuthz": {"address": "127.0.0.1:1", "features": []}},
     "auth.apiKeys: the authorization check has no key store"),
    ("validate", {"auth": {"required": False}, "validate": {"query": [{"name": "page", "type": "integer"}]}}, {},
     "validate: request validation runs in the HTTP authorization check, and the gateway has no extAuthz"),
    ("validate-over-grpc", {"auth": {"required": False}, "validate": {"query": [{"name": "page", "type": "integer"}]}},
     {"extAuthz": {"address": "127.0.0.1:1", "protocol": "grpc"}}, "extAuthz.protocol is grpc"),
    ("waiting-room", {"auth": {"required": False}, "waitingRoom": {"admitPerSecond": 5, "maxWaiting": 10}}, {},
     "waitingRoom: the room is decided in the HTTP authorization check, and this gateway has no extAuthz"),
    ("waiting-room-no-ticket-key", {"auth": {"required": False}, "waitingRoom": {"admitPerSecond": 5, "maxWaiting": 10}},
     {"extAuthz": {"address": "127.0.0.1:1", "features": ["apiKeys"]}}, "waitingRoom: the authorization check has no ticket key"),
    ("upstream-token-no-signer", {"auth": {"upstreamToken": {"audience": "legacy"}}},
     {"extAuthz": {"address": "127.0.0.1:1", "features": ["tokenExchange"]}}, "auth.upstreamToken: the authorization check has no signing key"),
    ("upstream-token-no-exchange", {"auth": {"upstreamToken": {"audience": "legacy", "exchange": {"url": "https://sts.example/token"}}}},
     {"extAuthz": {"address": "127.0.0.1:1", "features": ["signedUpstreamTokens"]}}, "the authorization check has no token exchange"),
    ("upstream-token-fail-open", {"auth": {"upstreamToken": {"audience": "legacy"}}},
     {"extAuthz": {"address": "127.0.0.1:1", "failOpen": True}}, "auth.upstreamToken: the gateway has extAuthz.failOpen: true"),
    ("rate-limits", {"auth": {"required": False}, "rateLimits": [{"key": "ip", "limit": 5, "window": "10s"}]}, {},
     "rateLimits: this gateway has no rate-limit service"),
]


@pytest.mark.parametrize(("spec", "extra", "reason"), [case[1:] for case in REFUSALS], ids=[case[0] for case in REFUSALS])
def test_a_route_whose_prerequisite_is_missing_is_refused_alone(
    make_stack: StackFactory, spec: dict[str, Any], extra: dict[str, Any], reason: str
) -> None:
    stack = make_stack(upstreams=("svc-a",), control_plane_extra=extra)
    stack.commit_routes({"r.yaml": [CANARY, secured("guarded", **spec)]})
    stack.start(wait_path="/canary")
    assert stack.get("/guarded/x").status == 404, "not served with less protection than it asks for"
    row = route_row(stack, "default/guarded")
    assert (row["accepted"]["status"], row["accepted"]["reason"]) == ("False", "Unenforceable")
    assert reason in row["accepted"]["message"], row["accepted"]["message"]
    assert "Helm: " in row["accepted"]["message"] or "extAuthz.forwardHeaders" in row["accepted"]["message"]


def test_rate_limits_can_be_served_unlimited_by_choice_and_say_so(make_stack: StackFactory) -> None:
    stack = make_stack(upstreams=("svc-a",), control_plane_extra={"rateLimitsWithoutLimiter": "serveUnlimited"})
    limited = secured("limited", auth={"required": False}, rateLimits=[{"key": "ip", "limit": 1, "window": "60s"}])
    stack.commit_routes({"r.yaml": [CANARY, limited]})
    stack.start(wait_path="/canary")
    assert [stack.get("/limited/x").status for _ in range(3)] == [200, 200, 200], "served, without its limit"
    row = route_row(stack, "default/limited")
    assert row["accepted"]["status"] == "True"
    assert (row["enforced"]["status"], row["enforced"]["reason"]) == ("False", "NotEnforced")
    assert "rateLimits: not enforced" in row["enforced"]["message"]
    assert stack.control_plane.status()["not_enforced"] == {"default/limited": row["enforced"]["message"]}
    assert stack.control_plane.metric("gatehouse_routes_not_enforced", field="rateLimits") == 1


def test_an_error_rate_breaker_without_tallies_is_served_and_says_it_cannot_open(make_stack: StackFactory) -> None:
    stack = make_stack(upstreams=("svc-a",))
    breaker = secured("fragile", auth={"required": False}, circuitBreaker={"errorRate": {"windowCalls": 20}})
    stack.commit_routes({"r.yaml": [CANARY, breaker]})
    stack.start(wait_path="/canary")
    assert stack.get("/fragile/x").status == 200
    row = route_row(stack, "default/fragile")
    assert row["accepted"]["status"] == "True" and row["enforced"]["status"] == "False"
    assert "circuitBreaker.errorRate: the breaker cannot open by itself" in row["enforced"]["message"]
    assert stack.control_plane.metric("gatehouse_routes_not_enforced", field="circuitBreaker.errorRate") == 1
