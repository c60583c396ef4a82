"""What a hostile client or tenant tried, through real Envoy (issue 24): one test per hole,
named for it. Each failed before its fix (the note of the issue says which commit).

Holes 5 (validation bypasses) and 7 (the admin port) have their own files
(test_request_validation_envoy.py, test_admin_access.py); 9 (cross-namespace backends) is in
test_reference_grants_git.py and tests/e2e/test_kubernetes_routes.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.ext_authz import ExtAuthzProcess
from tests.harness.gateway import GatewayStack
from tests.harness.http_client import wait_for
from tests.harness.issuer import TestIssuer
from tests.harness.route_repo import route_doc
from tests.integration.conftest import StackFactory, ext_authz_entry
from tests.integration.test_route_shields_envoy import served


class Gateway:
    """A stack with the lean HTTP check and a test issuer: ``start(routes)``."""

    def __init__(self, make_stack: StackFactory, tmp_path: Path, upstreams: tuple[str, ...] = ("svc-a", "svc-b")) -> None:
        self.issuer = TestIssuer()
        jwks = str(self.issuer.write_jwks(tmp_path / "jwks.json"))
        self.authz = ExtAuthzProcess(
            tmp_path / "authz",
            {"issuers": [{"issuer": self.issuer.issuer, "audiences": [self.issuer.audience], "jwksFile": jwks,
                          "requiredClaims": ["exp"]}]},
            transport="http",
        )
        self.stack: GatewayStack = make_stack(upstreams=upstreams, control_plane_extra={"extAuthz": ext_authz_entry([self.authz])})

    def start(self, routes: list[dict[str, Any]], wait_path: str) -> GatewayStack:
        self.stack.commit_routes({"r.yaml": routes})
        self.stack.start()
        self.authz.use_control_plane(self.stack.control_plane.xds_port)
        self.authz.start()
        wait_for(lambda: self.stack.get(wait_path).status == 200, 20, f"{wait_path} served")
        return self.stack

    def bearer(self, sub: str, **claims: Any) -> dict[str, str]:
        return {"authorization": f"Bearer {self.issuer.token(sub, **claims)}"}

    def stop(self) -> None:
        self.authz.stop()


@pytest.fixture
def gateway(make_stack: StackFactory, tmp_path: Path) -> Iterator[Gateway]:
    made = Gateway(make_stack, tmp_path)
    try:
        yield made
    finally:
        made.stop()


def test_1_cache_key_a_client_names_another_users_entry(gateway: Gateway) -> None:
    """A public cached route and a varyByUser route on the same path: an anonymous client
    naming alice in the cache's query parameter got alice's entry, and could plant one."""
    anonymous = {"name": "authorization", "present": True, "invert": True}
    stack = gateway.start([
        route_doc("profile-public", {"match": {"pathPrefix": "/profile", "headers": [anonymous]},
                                     "backends": [{"service": "svc-a", "port": 8080}], "auth": {"required": False},
                                     "cache": {"ttl": "60s"}}),
        route_doc("profile", {"match": {"pathPrefix": "/profile"}, "backends": [{"service": "svc-a", "port": 8080}],
                              "cache": {"ttl": "60s", "varyByUser": True}}),
    ], wait_path="/profile/ready")
    alice, bob = gateway.bearer("alice"), gateway.bearer("bob")
    upstream = stack.upstreams["svc-a"]

    mine = stack.get("/profile/me?x=1", headers=alice)
    assert mine.status == 200 and mine.json()["headers"]["x-user-id"] == "alice"
    assert "age" in stack.get("/profile/me?x=1", headers=alice).headers, "alice's entry is cached"

    # Reading alice's entry: every spelling of the parameter an anonymous client may send.
    for query in ("x=1&x-gatehouse-cache-user=alice", "x-gatehouse-cache-user=alice&x=1",
                  "x=1&x-gatehouse-cache-user=alice&x-gatehouse-cache-user=alice"):
        stolen = stack.get(f"/profile/me?{query}")
        assert stolen.status == 200
        assert "x-user-id" not in stolen.json()["headers"], f"?{query} read alice's cached answer"
        # Issue 33: the key is no longer a query parameter; the query reaches the upstream as sent.
        assert stolen.json()["path"] == f"/profile/me?{query}"

    # Planting: an anonymous answer stored under bob's key, then served to bob.
    before = served(upstream)
    planted = stack.get("/profile/feed?y=2&x-gatehouse-cache-user=bob")
    assert planted.status == 200
    theirs = stack.get("/profile/feed?y=2", headers=bob)
    assert theirs.status == 200 and "age" not in theirs.headers, "bob got an entry an anonymous client planted"
    assert theirs.json()["headers"]["x-user-id"] == "bob"
    assert served(upstream) - before == 2


def test_4_trailing_dot_host_skips_the_hosts_authenticated_route(gateway: Gateway) -> None:
    """`Host: api.example.com.` (and with a port, any case) matched no named host and got the
    host-less public route, past api.example.com's authentication."""
    stack = gateway.start([
        route_doc("secure", {"hosts": ["api.example.com"], "match": {"pathPrefix": "/data"},
                             "backends": [{"service": "svc-a", "port": 8080}]}),
        route_doc("open", {"match": {"pathPrefix": "/"}, "backends": [{"service": "svc-b", "port": 8080}],
                           "auth": {"required": False}}),
    ], wait_path="/data/ready")
    port = stack.listener_port
    assert stack.get("/data/x", headers={"host": "api.example.com"}).status == 401
    for host in ("api.example.com.", f"api.example.com.:{port}", "API.Example.COM.", f"API.EXAMPLE.COM:{port}"):
        reply = stack.get("/data/x", headers={"host": host})
        assert reply.status == 401, f"Host: {host} reached {reply.upstream} without a token"
    assert stack.get("/data/x", headers={"host": "api.example.com.", **gateway.bearer("alice")}).upstream == "svc-a"
    assert stack.get("/data/x", headers={"host": "other.example.com"}).upstream == "svc-b"


def judged(stack: GatewayStack, commit: str) -> bool:
    """The Git source has applied ``commit`` or refused it."""
    source = stack.control_plane.status()["sources"][0]
    return bool(source["serving"] == commit or (source["latest"] == commit and source["rejected"]))


def test_2_route_forges_identity_for_its_upstream(make_stack: StackFactory) -> None:
    """`headers.request.set: {x-user-id: alice, x-scope: ...}` on a public route sent that
    identity upstream with no token; `remove` stripped a verified one. Refused now: the
    commit is reported with file, field and reason, and the last good one stays live."""
    stack = make_stack(upstreams=("svc-a",))
    public = route_doc("public", {"match": {"pathPrefix": "/public"}, "backends": [{"service": "svc-a", "port": 8080}],
                                  "auth": {"required": False}})
    stack.commit_routes({"r.yaml": [public]})
    stack.start(wait_path="/public/x")
    for headers in ({"set": {"x-user-id": "alice", "x-scope": "orders:read orders:write"}}, {"remove": ["x-user-id"]},
                    {"set": {"authorization": "Bearer minted"}}, {"set": {"x-gatehouse-route": "shop/admin"}}):
        forging = route_doc("public", {**public["spec"], "headers": {"request": headers}})
        commit = stack.commit_routes({"r.yaml": [forging]})
        wait_for(lambda: judged(stack, commit), 10, "the commit applied or refused")
        deadline = time.monotonic() + 1.0  # long enough for Envoy to get a commit that was applied
        while time.monotonic() < deadline:
            seen = stack.get("/public/x").json()["headers"]
            assert "x-user-id" not in seen and "x-scope" not in seen, f"{headers} forged an identity upstream"
            assert seen.get("authorization") != "Bearer minted" and "x-gatehouse-route" not in seen, headers
        rejected = stack.control_plane.status()["sources"][0]["rejected"]
        assert rejected is not None and "spec.headers.request" in str(rejected), rejected
    # A client's own copies never pass either.
    forged = stack.get("/public/x", headers={"x-user-id": "alice", "X-Scope": "admin"}).json()["headers"]
    assert "x-user-id" not in forged and "x-scope" not in forged


def test_3_client_identity_header_selects_a_route(make_stack: StackFactory) -> None:
    """`match.headers: [{name: x-user-role, exact: admin}]` was chosen by any client sending
    `x-user-role: admin`, token or not. Refused now: the route is never configured."""
    stack = make_stack(upstreams=("svc-a", "svc-b"))
    ordinary = route_doc("reports", {"match": {"pathPrefix": "/reports"}, "backends": [{"service": "svc-a", "port": 8080}],
                                     "auth": {"required": False}})
    admin = route_doc("reports-admin", {"match": {"pathPrefix": "/reports", "headers": [{"name": "x-user-role", "exact": "admin"}]},
                                        "backends": [{"service": "svc-b", "port": 8080}], "auth": {"required": False}})
    stack.commit_routes({"r.yaml": [ordinary]})
    stack.start(wait_path="/reports/q3")
    commit = stack.commit_routes({"r.yaml": [ordinary], "admin.yaml": [admin]})
    wait_for(lambda: judged(stack, commit), 10, "the commit applied or refused")
    deadline = time.monotonic() + 1.0  # long enough for Envoy to get a commit that was applied
    while time.monotonic() < deadline:
        for role in ("admin", "Admin", "ADMIN"):
            reply = stack.get("/reports/q3", headers={"x-user-role": role})
            assert reply.upstream == "svc-a", f"x-user-role: {role} selected the admin route"
    rejected = str(stack.control_plane.status()["sources"][0]["rejected"])
    assert "admin.yaml" in rejected and "spec.match.headers[0].name" in rejected and "x-user-role is an identity header" in rejected


def test_8_token_swap_mints_tokens_for_any_audience_and_posts_tokens_anywhere(
    make_stack: StackFactory, tmp_path: Path
) -> None:
    """`auth.upstreamToken.audience` was free text (a route author collected replayable
    tokens for a victim service's audience) and `exchange.url` any URL (clients' tokens
    POSTed to it). Now ext_authz's config lists what each namespace may ask for: anything
    else refuses that route alone (503, reported on its status); the others keep serving."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from tests.harness.token_exchange import TokenExchangeServer

    issuer = TestIssuer()
    (tmp_path / "authz").mkdir(parents=True)
    key = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "authz" / "signing.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    collector = TokenExchangeServer(expires_in=300).start()  # the attacker's "exchange endpoint"
    authz = ExtAuthzProcess(
        tmp_path / "authz",
        {"issuers": [{"issuer": issuer.issuer, "audiences": [issuer.audience], "jwksFile": str(issuer.write_jwks(tmp_path / "jwks.json")),
                      "requiredClaims": ["exp"]}]},
        transport="http",
    )
    authz.config["http"]["upstreamTokens"] = {"issuer": "https://gateway.internal/", "keyFile": "signing.pem",
                                              "audiences": {"billing": ["legacy-billing"]}}
    # The repo may claim both namespaces: what is judged here is ext_authz's list.
    stack = make_stack(upstreams=("svc-a",), control_plane_extra={"extAuthz": ext_authz_entry([authz])}, git_namespaces=["billing", "evil"])
    backend = [{"service": "svc-a", "port": 8080}]
    stack.commit_routes({"r.yaml": [
        route_doc("invoices", {"match": {"pathPrefix": "/invoices"}, "backends": backend,
                               "auth": {"upstreamToken": {"audience": "legacy-billing"}}}, namespace="billing"),
        route_doc("grab", {"match": {"pathPrefix": "/grab"}, "backends": backend,
                           "auth": {"upstreamToken": {"audience": "legacy-billing"}}}, namespace="evil"),
        route_doc("leak", {"match": {"pathPrefix": "/leak"}, "backends": backend,
                           "auth": {"upstreamToken": {"audience": "legacy-billing", "exchange": {"url": collector.url}}}},
                  namespace="billing"),
        route_doc("orders", {"match": {"pathPrefix": "/orders"}, "backends": backend}, namespace="billing"),
    ]})
    try:
        stack.start()
        authz.use_control_plane(stack.control_plane.xds_port)
        authz.start()
        token = {"authorization": f"Bearer {issuer.token('alice')}"}
        wait_for(lambda: stack.get("/invoices/1", headers=token).status == 200, 20, "the granted swap route served")
        assert stack.get("/orders/1", headers=token).status == 200, "the other routes keep their rules"
        for path in ("/grab/1", "/leak/1"):
            refused = stack.get(path, headers=token)
            assert refused.status == 503 and refused.json()["error"]["code"] == "authorization_unavailable", (path, refused.body)
        assert collector.requests == [], "no client token was sent to an unlisted endpoint"
        code, body = stack.control_plane._request("/status/routes")
        rows = {row["route"]: row for row in __import__("json").loads(body)["routes"]}
        grab = rows["evil/grab"]["programmed"]
        assert grab["reason"] == "Rejected" and "audience 'legacy-billing' is not one routes in namespace 'evil' may ask for" in grab["message"]
        assert "is not a listed endpoint" in rows["billing/leak"]["programmed"]["message"]
        assert rows["billing/invoices"]["programmed"]["status"] == "True"
    finally:
        authz.stop()
        collector.stop()


def test_6_method_and_trailing_slash_fall_through_to_a_public_route(gateway: Gateway) -> None:
    """`POST /orders/42` and `/orders/42/` on a GET-only authenticated route fell to the broader
    public route, unannounced. Now the route's status says so (Enforced=False, naming the
    public route), and `match.otherMethods: reject` answers other methods 405 instead."""
    backend = {"backends": [{"service": "svc-a", "port": 8080}]}
    by_id = route_doc("orders-by-id", {"match": {"path": "/orders/{id}", "methods": ["GET", "HEAD"]}, **backend})
    legacy = route_doc("orders-legacy", {"match": {"path": "/orders/**"}, "backends": [{"service": "svc-b", "port": 8080}],
                                         "auth": {"required": False}})
    stack = gateway.start([by_id, legacy], wait_path="/orders/a/b")
    assert stack.get("/orders/42").status == 401
    assert stack.get("/orders/42", method="POST").upstream == "svc-b", "the fall-through the warning is about"
    enforced = route_row(stack, "default/orders-by-id")["enforced"]
    assert (enforced["status"], enforced["reason"]) == ("False", "PublicFallThrough")
    assert "POST /orders/x (a method the route does not take) falls through to the public route default/orders-legacy" in enforced["message"]
    assert "GET /orders/x/ (a trailing slash) falls through" in enforced["message"]
    assert stack.control_plane.metric("gatehouse_routes_not_enforced", field="fallThrough") == 1

    # The route opts into 405 for the methods it does not take.
    rejecting = route_doc("orders-by-id", {"match": {"path": "/orders/{id}", "methods": ["GET", "HEAD"], "otherMethods": "reject"},
                                           **backend})
    stack.commit_routes({"r.yaml": [rejecting, legacy]})
    wait_for(lambda: stack.get("/orders/42", method="POST").status == 405, 10, "POST answered 405")
    refused = stack.get("/orders/42", method="DELETE")
    assert refused.status == 405 and refused.headers["allow"] == "GET, HEAD"
    assert refused.json()["error"]["code"] == "method_not_allowed" and refused.json()["error"]["request_id"]
    assert stack.get("/orders/42").status == 401, "the route's own methods still need a token"
    assert stack.get("/orders/42", headers=gateway.bearer("alice")).upstream == "svc-a"
    assert stack.get("/orders/a/b", method="POST").upstream == "svc-b", "the broader route keeps its own paths"
    enforced = route_row(stack, "default/orders-by-id")["enforced"]
    assert "a method the route does not take" not in enforced["message"] and "a trailing slash" in enforced["message"]


def route_row(stack: GatewayStack, route_id: str) -> dict[str, Any]:
    from tests.integration.test_fail_closed_envoy import route_row as row

    return row(stack, route_id)
