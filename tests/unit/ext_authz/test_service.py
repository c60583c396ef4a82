"""The authorization decision in process, on both transports: ``AuthorizationService.Check``
(gRPC, CheckRequests built from the envoy.service.auth.v3 protos) and ``HttpCheck`` (Envoy's
HTTP protocol: the route's rules from a RoutePolicy table, the answer parsed back into
the same CheckResponse shape). A real TokenVerifier over in-memory keys, a real
RevocationMirror over an in-memory store (or none); decisions, audit events and metrics.
Every test runs on both transports unless marked ``transports("grpc")``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest
import structlog
from envoy.service.auth.v3 import attribute_context_pb2, external_auth_pb2, external_auth_pb2_grpc
from google.rpc import code_pb2
from prometheus_client import REGISTRY

from envoy.config.core.v3 import base_pb2
from envoy.type.v3 import http_status_pb2
from google.rpc import status_pb2

from ext_authz.config import Issuer
from ext_authz.check.http_check import HttpCheck
from ext_authz.check.route_table import RouteTable
from ext_authz.check.steps import CheckParts
from servicekit.check_contract import ROUTE_HEADER
from servicekit.http1_server import Request
from servicekit.protos.gatehouse.policy.v1 import policy_pb2
from ext_authz.errors import AuthzError, ForbiddenError, RevokedError, TokenError, UnavailableError
from ext_authz.tokens.jwks import IssuerKeys
from ext_authz.revocation.mirror import RevocationMirror
from ext_authz.revocation.entries import Verdict
from ext_authz.service import Authorizer, AuthorizationService
from ext_authz.tokens.verifier import TokenVerifier
from servicekit.audit import AUTHZ_DENIED, AuditEvent, MemoryAuditSink
from tests.harness.ports import free_port
from tests.harness.issuer import forge_signature
from tests.unit.ext_authz.signing import ISSUER, NOW, FakeClock, FakeSource, claims, ec_key, issuer, rsa_key
from tests.unit.ext_authz.revocation.fake_store import FakeStore

AttributeContext = attribute_context_pb2.AttributeContext


def check_request(headers: dict[str, str] | None = None, **extensions: str) -> external_auth_pb2.CheckRequest:
    return external_auth_pb2.CheckRequest(
        attributes=AttributeContext(
            request=AttributeContext.Request(http=AttributeContext.HttpRequest(method="GET", path="/orders/1", headers=headers or {})),
            context_extensions=extensions,
        )
    )


def bearer(token: str, request_id: str = "req-1") -> dict[str, str]:
    return {"authorization": f"Bearer {token}", "x-request-id": request_id}


def decisions(result: str, reason: str) -> float:
    return REGISTRY.get_sample_value("gatehouse_authz_decisions_total", {"result": result, "reason": reason}) or 0.0


def ok_headers(response: external_auth_pb2.CheckResponse) -> dict[str, str]:
    assert response.status.code == code_pb2.OK, response
    return {o.header.key: o.header.value for o in response.ok_response.headers}


def denial(response: external_auth_pb2.CheckResponse) -> tuple[int, dict[str, str], dict[str, Any]]:
    assert response.WhichOneof("http_response") == "denied_response", response
    headers = {o.header.key: o.header.value for o in response.denied_response.headers}
    body: dict[str, Any] = json.loads(response.denied_response.body)["error"]
    return response.denied_response.status.code, headers, body


TRANSPORTS = ("grpc", "http")
_transport = ["grpc"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("transports")
    metafunc.parametrize("transport", marker.args if marker else TRANSPORTS, indirect=True)


@pytest.fixture
def transport(request: pytest.FixtureRequest) -> str:
    _transport[0] = request.param
    return str(request.param)


@pytest.fixture(autouse=True)
def _uses_transport(transport: str) -> None:
    """Every test is parametrized by transport; ``build`` reads the current one."""


_GRPC_CODES = {401: code_pb2.UNAUTHENTICATED, 403: code_pb2.PERMISSION_DENIED, 503: code_pb2.UNAVAILABLE}


def as_check_response(raw: bytes) -> external_auth_pb2.CheckResponse:
    """An HTTP answer in the CheckResponse shape, so one set of assertions reads both."""
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    status = int(status_line.split()[1])
    headers = [tuple(part.strip() for part in line.split(":", 1)) for line in lines]
    headers = [(k.lower(), v) for k, v in headers if k.lower() != "content-length"]
    assert len(body) == int(dict((k.lower(), v) for k, v in (l.split(":", 1) for l in lines))["content-length"])
    option = external_auth_pb2.OkHttpResponse
    if status == 200:
        remove = [v.strip() for k, v in headers if k == "x-envoy-auth-headers-to-remove" for v in v.split(",")]
        kept = [base_pb2.HeaderValueOption(header=base_pb2.HeaderValue(key=k, value=v)) for k, v in headers if k != "x-envoy-auth-headers-to-remove"]
        return external_auth_pb2.CheckResponse(status=status_pb2.Status(code=code_pb2.OK), ok_response=option(headers=kept, headers_to_remove=remove))
    return external_auth_pb2.CheckResponse(
        status=status_pb2.Status(code=_GRPC_CODES.get(status, code_pb2.PERMISSION_DENIED)),
        denied_response=external_auth_pb2.DeniedHttpResponse(
            status=http_status_pb2.HttpStatus(code=status),
            headers=[base_pb2.HeaderValueOption(header=base_pb2.HeaderValue(key=k, value=v)) for k, v in headers],
            body=body.decode(),
        ),
    )


class Harness:
    def __init__(self, service: AuthorizationService, audit: MemoryAuditSink, verifier: TokenVerifier, issuer: Issuer, transport: str) -> None:
        self.service = service
        self.audit = audit
        self.verifier = verifier
        self.issuer = issuer
        self.transport = transport
        self.table = RouteTable(CheckParts(service._authorizer, service.denial_audit))
        self.http = HttpCheck(self.table)

    async def check(self, headers: dict[str, str] | None = None, **extensions: str) -> external_auth_pb2.CheckResponse:
        if self.transport == "grpc":
            response: external_auth_pb2.CheckResponse = await self.service.Check(check_request(headers, **extensions), None)
            return response
        route = extensions.get("route", "test/route")
        policy = policy_pb2.RoutePolicy(route=route)
        policy.auth.SetInParent()
        for name in ("audiences", "scopes", "roles"):
            getattr(policy.auth, name).extend(extensions.get(name, "").split())
        self.table.replace([policy])
        return as_check_response(await self.http(Request("GET", "/orders/1", {**(headers or {}), ROUTE_HEADER: route})))

    def denials(self) -> list[AuditEvent]:
        return self.audit.of_kind(AUTHZ_DENIED)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW)


@pytest.fixture
async def mirror(clock: FakeClock) -> AsyncIterator[RevocationMirror]:
    m = RevocationMirror(FakeStore(), grace=30, heartbeat=0.05, min_backoff=0.01, max_backoff=0.05, clock=clock)
    await m.start()
    assert await m.wait_ready(2)
    yield m
    await m.stop()


async def build(
    clock: FakeClock, mirror: RevocationMirror | None, *, source: FakeSource | None = None, **issuer_fields: Any
) -> Harness:
    config = issuer(**issuer_fields)
    keys = IssuerKeys(config, source or FakeSource(rsa_key().jwk(), ec_key().jwk()), clock=FakeClock(100.0))
    await keys.refresh()
    verifier = TokenVerifier([keys], cache_size=100, max_token_bytes=8192, clock=clock)
    audit = MemoryAuditSink()
    service = AuthorizationService(Authorizer(verifier, {ISSUER: config}, mirror, clock=clock), audit)
    return Harness(service, audit, verifier, config, _transport[0])


@pytest.fixture
async def h(clock: FakeClock, mirror: RevocationMirror) -> Harness:
    return await build(clock, mirror)


def assert_no_secrets(event: AuditEvent, token: str) -> None:
    text = json.dumps(event.as_dict())
    for piece in token.split("."):
        assert len(piece) < 8 or piece not in text, "the audit trail never carries the token"
    assert "orders:read" not in text and "admin" not in text, "nor claim values beyond subject and jti"


# --- OK -----------------------------------------------------------------------------------------


async def test_a_valid_token_is_allowed_with_identity_headers(h: Harness) -> None:
    before = decisions("allow", "ok")
    token = rsa_key().sign(claims(scope="orders:read orders:write", role="clerk"))
    response = await h.check(bearer(token), route="shop/orders", scopes="orders:read")
    assert ok_headers(response) == {"x-user-id": "user-1", "x-user-role": "clerk", "x-scope": "orders:read orders:write", "x-principal": "jwt;https://auth.example.com/;user-1"}
    assert decisions("allow", "ok") == before + 1
    assert h.audit.events == [], "allowed requests are not audited as denials"


async def test_an_es256_token_and_a_scp_list_are_allowed(h: Harness) -> None:
    token = ec_key().sign(claims(scope=None, scp=["orders:read"], role=None, roles=["admin"]))
    response = await h.check(bearer(token), scopes="orders:read", roles="admin")
    # The default mapping reads `scope` and `role`: a token with only scp/roles gets just x-user-id.
    assert ok_headers(response) == {"x-user-id": "user-1", "x-principal": "jwt;https://auth.example.com/;user-1"}


async def test_the_issuers_claim_mapping_is_used(clock: FakeClock) -> None:
    h = await build(clock, None, claimHeaders={"x-tenant": "tid", "x-user-id": "sub"})
    token = rsa_key().sign(claims(tid="t-9"))
    assert ok_headers(await h.check(bearer(token))) == {"x-tenant": "t-9", "x-user-id": "user-1", "x-principal": "jwt;https://auth.example.com/;user-1"}


async def test_an_unsafe_claim_is_left_out_and_logged_without_its_value(h: Harness) -> None:
    token = rsa_key().sign(claims(role="admin\r\nx-evil: 1"))
    with structlog.testing.capture_logs() as logs:
        response = await h.check(bearer(token))
    assert ok_headers(response) == {"x-user-id": "user-1", "x-scope": "orders:read", "x-principal": "jwt;https://auth.example.com/;user-1"}
    [warning] = [entry for entry in logs if entry["event"] == "claims_not_forwarded"]
    assert warning["claims"] == ["role"] and warning["log_level"] == "warning"
    assert "x-evil" not in json.dumps(warning, default=str)


async def test_a_repeat_token_is_served_from_the_cache(h: Harness) -> None:
    token = rsa_key().sign(claims())
    for _ in range(3):
        ok_headers(await h.check(bearer(token)))
    assert (h.verifier.verifications, h.verifier.cache_hits) == (1, 2)


async def test_without_a_mirror_revocation_is_not_checked(
    clock: FakeClock, mirror: RevocationMirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = rsa_key().sign(claims())
    await mirror.revoke("jti-1", NOW + 600)
    await mirror.block("user-1", None)
    status, _, body = denial(await (await build(clock, mirror)).check(bearer(token)))
    assert (status, body["reason"]) == (401, "revoked"), "the control: with the mirror this token is denied"
    consulted: list[str] = []

    def spy(name: str) -> Callable[..., Any]:
        real = getattr(RevocationMirror, name)

        def recording(self: RevocationMirror, *args: Any) -> Any:
            consulted.append(name)
            return real(self, *args)

        return recording

    for name in ("check", "enforce"):
        monkeypatch.setattr(RevocationMirror, name, spy(name))
    h = await build(clock, None)
    ok_headers(await h.check(bearer(token)))
    assert consulted == [], "no mirror was consulted"


@pytest.mark.transports("grpc")  # the gRPC wire itself
async def test_allowed_over_a_real_grpc_channel(h: Harness) -> None:
    server = grpc.aio.server()
    external_auth_pb2_grpc.add_AuthorizationServicer_to_server(h.service, server)
    port = server.add_insecure_port(f"127.0.0.1:{free_port()}")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = external_auth_pb2_grpc.AuthorizationStub(channel)
            good = await stub.Check(check_request(bearer(rsa_key().sign(claims()))), timeout=5)
            assert ok_headers(good)["x-user-id"] == "user-1"
            bad = await stub.Check(check_request({"x-request-id": "r-9"}), timeout=5)
            status, _, body = denial(bad)
            assert (status, body["reason"], body["request_id"]) == (401, "missing", "r-9")
            assert bad.status.code == code_pb2.UNAUTHENTICATED
    finally:
        await server.stop(None)


# --- 401: missing or invalid tokens ------------------------------------------------------------


def _bad_signature() -> str:
    return forge_signature(rsa_key().sign(claims()))


INVALID: dict[str, tuple[Callable[[], str | None], str]] = {
    "missing": (lambda: None, "missing"),
    "wrong-scheme": (lambda: "Basic dXNlcjpwYXNz", "malformed"),
    "duplicate": (lambda: f"Bearer {rsa_key().sign(claims())},Bearer {rsa_key().sign(claims())}", "duplicate"),
    "two-segments": (lambda: "Bearer abc.def", "malformed"),
    "bad-signature": (lambda: f"Bearer {_bad_signature()}", "bad_signature"),
    "expired": (lambda: f"Bearer {rsa_key().sign(claims(exp=int(NOW) - 31))}", "expired"),
    "wrong-audience": (lambda: f"Bearer {rsa_key().sign(claims(aud='other'))}", "audience"),
    "no-jti": (lambda: f"Bearer {rsa_key().sign(claims(jti=None))}", "missing_jti"),
    "alg-none": (lambda: "Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ1c2VyLTEifQ.", "alg_not_allowed"),
}


@pytest.mark.parametrize("case", list(INVALID))
async def test_a_missing_or_invalid_token_is_401_and_audited_without_identity(h: Harness, case: str) -> None:
    make, reason = INVALID[case]
    authorization = make()
    headers = {"x-request-id": "req-7"}
    if authorization is not None:
        headers["authorization"] = authorization
    before = decisions("deny", reason)
    status, out, body = denial(await h.check(headers, route="shop/orders"))
    assert status == 401
    assert out["www-authenticate"].startswith('Bearer realm="gatehouse", error="invalid_token"')
    assert body["code"] == "invalid_token" and body["reason"] == reason and body["request_id"] == "req-7"
    raw = json.dumps(body)
    assert "user-1" not in raw and "jti-1" not in raw
    assert decisions("deny", reason) == before + 1
    [event] = h.denials()
    assert event.actor == "ext_authz" and event.reason == reason
    assert event.subject is None and event.jti is None, "an unverified token's sub/jti never reach the audit trail"
    assert dict(event.details) == {"route": "shop/orders", "status": 401, "request_id": "req-7"}
    if authorization is not None:
        assert_no_secrets(event, authorization.removeprefix("Bearer "))


async def test_a_denial_without_a_request_id_has_an_empty_one(h: Harness) -> None:
    _, _, body = denial(await h.check({}))
    assert body["request_id"] == ""


# --- revocation --------------------------------------------------------------------------------


async def test_a_revoked_token_is_401_revoked_even_when_cached(h: Harness, mirror: RevocationMirror) -> None:
    token = rsa_key().sign(claims(jti="jti-revoke-me"))
    ok_headers(await h.check(bearer(token)))  # verified and cached
    await mirror.revoke("jti-revoke-me", NOW + 600)
    assert mirror.check("jti-revoke-me", "user-1", NOW) is Verdict.REVOKED
    before = decisions("deny", "revoked")
    status, headers, body = denial(await h.check(bearer(token, "req-r"), route="shop/orders"))
    assert status == 401
    assert 'error="invalid_token"' in headers["www-authenticate"]
    assert (body["code"], body["reason"], body["request_id"]) == ("invalid_token", "revoked", "req-r")
    assert decisions("deny", "revoked") == before + 1
    [event] = h.denials()
    assert (event.subject, event.jti, event.reason) == ("user-1", "jti-revoke-me", "revoked")
    assert dict(event.details) == {"route": "shop/orders", "status": 401, "request_id": "req-r"}
    assert_no_secrets(event, token)
    # Another token of the same subject is unaffected.
    ok_headers(await h.check(bearer(rsa_key().sign(claims(jti="jti-other")))))


async def test_a_blocked_subject_is_403_blocked(h: Harness, mirror: RevocationMirror) -> None:
    await mirror.block("user-1", None)
    token = rsa_key().sign(claims())
    before = decisions("deny", "blocked")
    status, headers, body = denial(await h.check(bearer(token), route="shop/orders"))
    assert status == 403
    assert 'error="insufficient_scope"' in headers["www-authenticate"]
    assert (body["code"], body["reason"]) == ("insufficient_scope", "blocked")
    assert decisions("deny", "blocked") == before + 1
    [event] = h.denials()
    assert (event.subject, event.jti, event.details["status"]) == ("user-1", "jti-1", 403)
    ok_headers(await h.check(bearer(rsa_key().sign(claims(sub="user-2", jti="j2")))))
    await mirror.unblock("user-1")
    ok_headers(await h.check(bearer(token)))


async def test_revocation_is_checked_before_the_route_requirements(h: Harness, mirror: RevocationMirror) -> None:
    await mirror.revoke("jti-1", NOW + 600)
    status, _, body = denial(await h.check(bearer(rsa_key().sign(claims())), roles="nobody-has-this"))
    assert (status, body["reason"]) == (401, "revoked")


async def test_an_unsynced_mirror_fails_closed_with_503(clock: FakeClock) -> None:
    unsynced = RevocationMirror(FakeStore(), policy="closed", clock=clock)  # never started
    h = await build(clock, unsynced)
    before = decisions("deny", "revocation_unavailable")
    response = await h.check(bearer(rsa_key().sign(claims())), route="r")
    status, headers, body = denial(response)
    assert status == 503 and response.status.code == code_pb2.UNAVAILABLE
    assert headers["retry-after"] == "1" and "www-authenticate" not in headers
    assert body["reason"] == "revocation_unavailable"
    assert decisions("deny", "revocation_unavailable") == before + 1
    [event] = h.denials()
    assert (event.subject, event.jti, event.details["status"]) == ("user-1", "jti-1", 503)


async def test_an_issuer_without_keys_is_503_no_keys(clock: FakeClock) -> None:
    source = FakeSource(rsa_key().jwk())
    source.fail = True
    h = await build(clock, None, source=source)
    status, _, body = denial(await h.check(bearer(rsa_key().sign(claims()))))
    assert (status, body["reason"]) == (503, "no_keys")
    [event] = h.denials()
    assert event.subject is None and event.jti is None


# --- 403: the route's requirements -------------------------------------------------------------

REQUIREMENT_FAILURES = [
    ({"audiences": "billing"}, "audience"),
    ({"scopes": "orders:read orders:write"}, "scope"),
    ({"roles": "support"}, "role"),
]


@pytest.mark.parametrize(("extensions", "reason"), REQUIREMENT_FAILURES, ids=[r for _, r in REQUIREMENT_FAILURES])
async def test_a_requirement_failure_is_403(h: Harness, extensions: dict[str, str], reason: str) -> None:
    token = rsa_key().sign(claims(aud=["api", "web"], scope="orders:read", role="admin"))
    before = decisions("deny", reason)
    status, headers, body = denial(await h.check(bearer(token), route="shop/orders", **extensions))
    assert status == 403
    assert headers["www-authenticate"].startswith('Bearer realm="gatehouse", error="insufficient_scope"')
    assert (body["code"], body["reason"]) == ("insufficient_scope", reason)
    assert "admin" not in json.dumps(body) and "web" not in body["message"]
    assert decisions("deny", reason) == before + 1
    [event] = h.denials()
    assert (event.subject, event.jti, event.reason) == ("user-1", "jti-1", reason)
    assert dict(event.details) == {"route": "shop/orders", "status": 403, "request_id": "req-1"}
    assert_no_secrets(event, token)


async def test_requirements_that_hold_are_allowed(h: Harness) -> None:
    token = rsa_key().sign(claims(aud=["api", "web"], scope="orders:read orders:write", role="admin"))
    response = await h.check(bearer(token), route="r", audiences="web", scopes="orders:write", roles="support admin")
    assert ok_headers(response)["x-user-id"] == "user-1"


# --- Authorizer.decide directly -----------------------------------------------------------------


@pytest.mark.transports("grpc")  # not about the transport
async def test_decide_returns_identity_and_the_verified_token(clock: FakeClock, mirror: RevocationMirror) -> None:
    h = await build(clock, mirror)
    authorizer = h.service._authorizer
    identity, token = await authorizer.decide({"authorization": "Bearer " + rsa_key().sign(claims())}, {})
    assert identity == {"x-user-id": "user-1", "x-user-role": "admin", "x-scope": "orders:read", "x-principal": "jwt;https://auth.example.com/;user-1"}
    assert (token.subject, token.jti, token.issuer) == ("user-1", "jti-1", ISSUER)


@pytest.mark.transports("grpc")  # not about the transport
@pytest.mark.parametrize(
    ("setup", "expected", "verified"),
    [
        ("invalid", TokenError, False),
        ("revoked", RevokedError, True),
        ("blocked", ForbiddenError, True),
        ("requirement", ForbiddenError, True),
    ],
)
async def test_decide_sets_subject_and_jti_only_after_verification(
    clock: FakeClock, mirror: RevocationMirror, setup: str, expected: type[AuthzError], verified: bool
) -> None:
    h = await build(clock, mirror)
    token = rsa_key().sign(claims(sub="sub-x", jti="jti-x"))
    if setup == "invalid":
        token = rsa_key().sign(claims(sub="sub-x", jti="jti-x", exp=int(NOW) - 100))
    elif setup == "revoked":
        await mirror.revoke("jti-x", NOW + 600)
    elif setup == "blocked":
        await mirror.block("sub-x", None)
    extensions = {"roles": "nobody"} if setup == "requirement" else {}
    with pytest.raises(expected) as info:
        await h.service._authorizer.decide({"authorization": f"Bearer {token}"}, extensions)
    assert (info.value.subject, info.value.jti) == (("sub-x", "jti-x") if verified else (None, None))


@pytest.mark.transports("grpc")  # not about the transport
async def test_an_unavailable_error_keeps_its_type(clock: FakeClock) -> None:
    h = await build(clock, RevocationMirror(FakeStore(), clock=clock))
    with pytest.raises(UnavailableError):
        await h.service._authorizer.decide({"authorization": "Bearer " + rsa_key().sign(claims())}, {})


async def test_a_mapped_header_without_a_claim_is_removed_from_the_request(clock: FakeClock) -> None:
    h = await build(clock, None, claimHeaders={"x-user-id": "sub", "x-tenant": "tid", "x-user-role": "role"})
    token = rsa_key().sign(claims(role="bad\nvalue"))  # no tid; role unsafe
    response = await h.check(bearer(token))
    assert ok_headers(response) == {"x-user-id": "user-1", "x-principal": "jwt;https://auth.example.com/;user-1"}
    assert set(response.ok_response.headers_to_remove) == {"x-tenant", "x-user-role"}
