"""Token swap through real Envoy, the control plane, ext_authz over HTTP and echo upstreams.

A route with ``auth.upstreamToken`` sends its upstream an internal token in place of the
client's: signed by ext_authz (valid against the JWKS its metrics port serves, with the
verified ``sub``, the route's ``aud``, a 60 s ``exp``) or obtained from a real RFC 8693
endpoint (tests/harness/token_exchange.py). The client's token reaches neither upstream.
With the exchange endpoint down the client gets 503 ``upstream_token_unavailable`` with
``Retry-After``, and the upstream is not called. A fail-open gateway serves no swap route.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.harness.ext_authz import ExtAuthzProcess
from tests.harness.gateway import GatewayStack
from tests.harness.issuer import TestIssuer
from tests.harness.route_repo import route_doc
from tests.harness.token_exchange import TokenExchangeServer
from tests.integration.conftest import StackFactory, ext_authz_entry

INTERNAL_ISSUER = "https://gateway.internal/"
TTL = 60


def routes(exchange_url: str) -> list[dict[str, Any]]:
    backend = [{"service": "svc-a", "port": 8080}]
    return [
        route_doc("billing", {"match": {"pathPrefix": "/billing"}, "backends": backend,
                              "auth": {"scopes": ["billing:read"], "upstreamToken": {"audience": "legacy-billing"}}}),
        route_doc("ledger", {"match": {"pathPrefix": "/ledger"}, "backends": backend,
                             "auth": {"upstreamToken": {"audience": "ledger", "exchange": {"url": exchange_url}}}}),
        route_doc("orders", {"match": {"pathPrefix": "/orders"}, "backends": backend}),
        route_doc("public", {"match": {"pathPrefix": "/public"}, "backends": backend, "auth": {"required": False}}),
    ]


@dataclass
class SwapStack:
    stack: GatewayStack
    authz: ExtAuthzProcess
    exchange: TokenExchangeServer
    issuer: TestIssuer

    def get(self, path: str, token: str | None) -> Any:
        headers = {"x-request-id": "req-swap"}
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        return self.stack.get(path, headers=headers)

    def log_text(self) -> str:
        assert self.authz.process is not None
        return self.authz.process.log_path.read_text(errors="replace")

    def jwks(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.authz.metrics_port}/.well-known/jwks.json", timeout=5) as reply:
            document: dict[str, Any] = json.loads(reply.read())
            return document


@contextlib.contextmanager
def swap_stack(make_stack: StackFactory, tmp_path: Path, *, fail_open: bool = False, workers: int = 1) -> Iterator[SwapStack]:
    issuer = TestIssuer()
    key = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "authz").mkdir(parents=True, exist_ok=True)
    (tmp_path / "authz" / "upstream-signing.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    exchange = TokenExchangeServer(expires_in=300).start()
    config = {
        "issuers": [{"issuer": issuer.issuer, "audiences": [issuer.audience], "jwksFile": str(issuer.write_jwks(tmp_path / "jwks.json"))}],
        "workers": workers,
    }
    authz = ExtAuthzProcess(tmp_path / "authz", config, transport="http")
    authz.config["http"]["upstreamTokens"] = {
        "issuer": INTERNAL_ISSUER, "keyFile": "upstream-signing.pem", "ttl": f"{TTL}s",
        "audiences": {"default": ["legacy-billing", "ledger"]},
        # The test's exchange endpoint is plain http on loopback.
        "exchange": {"timeout": "1s", "endpoints": [exchange.url], "allowPlainHttp": True},
    }
    stack = make_stack(control_plane_extra={"extAuthz": {**ext_authz_entry([authz]), "failOpen": fail_open}})
    stack.commit_routes({"routes.yaml": routes(exchange.url)})
    stack.start(wait_path="/public")
    authz.use_control_plane(stack.control_plane.xds_port)
    authz.start()
    try:
        yield SwapStack(stack, authz, exchange, issuer)
    finally:
        authz.stop()
        exchange.stop()


@pytest.fixture
def swap(make_stack: StackFactory, tmp_path: Path) -> Iterator[SwapStack]:
    with swap_stack(make_stack, tmp_path) as stack:
        yield stack


def seen_authorization(reply: Any) -> str:
    assert reply.status == 200, reply.body
    headers: dict[str, str] = reply.json()["headers"]
    return headers["authorization"].removeprefix("Bearer ")


def test_the_upstream_sees_only_a_signed_internal_token_valid_against_the_served_jwks(swap: SwapStack) -> None:
    client = swap.issuer.token("alice", scope="billing:read")
    reply = swap.get("/billing/invoices", client)
    internal = seen_authorization(reply)
    assert internal != client and client not in reply.body.decode(), "the client's token never reaches the upstream"
    key_set = swap.jwks()
    (jwk,) = key_set["keys"]
    assert set(jwk) == {"kty", "crv", "x", "y", "kid", "use", "alg"} and jwk["alg"] == "ES256"
    header = jwt.get_unverified_header(internal)
    assert header["kid"] == jwk["kid"]
    claims = jwt.decode(internal, jwt.PyJWK(jwk), algorithms=["ES256"], audience="legacy-billing", issuer=INTERNAL_ISSUER)
    assert claims["sub"] == "alice" and claims["aud"] == "legacy-billing"
    assert claims["exp"] - claims["iat"] == TTL and claims["exp"] <= time.time() + TTL + 1 and claims["jti"]
    assert seen_authorization(swap.get("/billing/invoices", client)) == internal, "reused for the same client token"
    other = seen_authorization(swap.get("/billing/invoices", swap.issuer.token("bob", scope="billing:read")))
    assert jwt.decode(other, jwt.PyJWK(jwk), algorithms=["ES256"], audience="legacy-billing")["sub"] == "bob"
    assert swap.get("/billing/invoices", swap.issuer.token("carol", scope="other")).status == 403, "still the route's rules"
    assert swap.get("/billing/invoices", None).status == 401
    plain = swap.issuer.token("alice")
    assert seen_authorization(swap.get("/orders/1", plain)) == plain, "a route without upstreamToken is unchanged"
    log = swap.log_text()
    assert client not in log and internal not in log, "no token is ever logged"


def test_an_exchanged_token_replaces_the_clients_and_a_down_endpoint_is_503(swap: SwapStack) -> None:
    client = swap.issuer.token("alice")
    reply = swap.get("/ledger/entries", client)
    assert seen_authorization(reply) == "exchanged-1-for-ledger" and client not in reply.body.decode()
    (sent,) = swap.exchange.requests
    assert sent == {
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
        "subject_token": client,
        "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
        "audience": "ledger",
    }
    assert seen_authorization(swap.get("/ledger/entries", client)) == "exchanged-1-for-ledger"
    assert len(swap.exchange.requests) == 1, "cached until shortly before expires_in"

    swap.exchange.stop()
    served = swap.stack.upstreams["svc-a"]
    down = swap.get("/ledger/entries", swap.issuer.token("bob"))
    assert down.status == 503, down.body
    assert down.json()["error"] == {
        "code": "upstream_token_unavailable",
        "message": "The gateway could not obtain the upstream service's credential. Retry later.",
        "request_id": "req-swap",
    }
    assert down.headers["retry-after"] == "1" and "x-upstream" not in down.headers, "answered by the gateway, not the upstream"
    assert served.alive()
    assert seen_authorization(swap.get("/ledger/entries", client)) == "exchanged-1-for-ledger", "a cached token still serves"
    assert swap.authz.metric("gatehouse_authz_decisions_total", result="deny", reason="upstream_token_unavailable") == 1
    log = swap.log_text()
    assert "upstream_token_exchange_failed" in log
    assert client not in log and "exchanged-1-for-ledger" not in log, "no token is ever logged"


def test_with_workers_the_supervisor_serves_the_jwks_every_worker_signs_with(make_stack: StackFactory, tmp_path: Path) -> None:
    """``workers: 2``: the metrics port is the supervisor's; it answers the JWKS from a
    worker, and a token signed by whichever worker took the check verifies against it."""
    with swap_stack(make_stack, tmp_path, workers=2) as swap:
        (jwk,) = swap.jwks()["keys"]
        for name in ("alice", "bob", "carol", "dave"):
            internal = seen_authorization(swap.get("/billing/x", swap.issuer.token(name, scope="billing:read")))
            assert jwt.decode(internal, jwt.PyJWK(jwk), algorithms=["ES256"], audience="legacy-billing")["sub"] == name


def test_a_fail_open_gateway_does_not_serve_swap_routes(make_stack: StackFactory, tmp_path: Path) -> None:
    """``extAuthz.failOpen: true`` would pass a failed check's request on with the client's
    token: the control plane leaves the swap routes out (404), the others serve."""
    with swap_stack(make_stack, tmp_path, fail_open=True) as swap:
        client = swap.issuer.token("alice", scope="billing:read")
        assert seen_authorization(swap.get("/orders/1", client)) == client
        for path in ("/billing/x", "/ledger/x"):
            reply = swap.get(path, client)
            assert reply.status == 404 and client not in reply.body.decode(), (path, reply.body)
        assert swap.exchange.requests == []
