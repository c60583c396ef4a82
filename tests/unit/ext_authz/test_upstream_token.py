"""Token swap's pure parts: the signer and its JWKS, the signing key file's refusals, the
per-(token, audience) cache and its lifetimes, coalesced exchanges, the exchange answer's
checks, and the route table refusals (NACK reasons)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from ext_authz.errors import ForbiddenError
from ext_authz.swap.exchange import ExchangeFailed, Exchanged, TokenExchange, parse_answer
from ext_authz.swap.signer import SigningKeyError, UpstreamSigner
from ext_authz.swap.tokens import SwapGrants, SwapRule, UpstreamTokens, UpstreamTokenUnavailable, swap_refusal, unavailable_parts
from servicekit.protos.gatehouse.policy.v1 import policy_pb2
from tests.unit.ext_authz.signing import NOW, FakeClock

ISS = "https://gateway.internal/"
SIGNED = SwapRule("legacy-billing")
EXCHANGED = SwapRule("ledger", "http://127.0.0.1:9/token")


def signer() -> UpstreamSigner:
    return UpstreamSigner(ec.generate_private_key(ec.SECP256R1()), issuer=ISS)


def pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def bearer(line: bytes) -> str:
    name, _, value = line.decode().rstrip("\r\n").partition(": ")
    assert name == "authorization" and value.startswith("Bearer ")
    return value.removeprefix("Bearer ")


def verify(token: str, key_set: dict[str, object], audience: str) -> dict[str, object]:
    (jwk,) = key_set["keys"]  # type: ignore[misc]
    key = jwt.PyJWK(jwk)
    assert jwt.get_unverified_header(token)["kid"] == key.key_id
    claims: dict[str, object] = jwt.decode(token, key, algorithms=["ES256", "RS256"], audience=audience, issuer=ISS, options={"verify_exp": False})
    return claims


class CountingExchange(TokenExchange):
    """An exchange that answers from memory: counts calls, can fail, can be held open."""

    def __init__(self, expires_in: float | None = 300.0) -> None:
        self.calls = 0
        self.expires_in = expires_in
        self.fail = False
        self.gate: asyncio.Event | None = None

    async def exchange(self, url: str, subject_token: str, audience: str) -> Exchanged:
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise ExchangeFailed(url, "connection", "ClientConnectorError")
        return Exchanged(f"x-{audience}-{self.calls}", self.expires_in)


def tokens(clock: FakeClock, *, exchange: TokenExchange | None = None, size: int = 100) -> UpstreamTokens:
    return UpstreamTokens(signer=signer(), exchange=exchange, ttl=60.0, cache_size=size, clock=clock)


async def test_the_signed_token_carries_the_subject_the_audience_and_a_short_exp() -> None:
    clock = FakeClock(NOW)
    swap = tokens(clock)
    assert swap.signer is not None
    claims = verify(bearer(await swap.line(SIGNED, b"h1", "alice", NOW + 3600, "client")), swap.signer.jwks(), "legacy-billing")
    assert (claims["iss"], claims["sub"], claims["aud"], claims["iat"], claims["exp"]) == (ISS, "alice", "legacy-billing", int(NOW), int(NOW) + 60)
    assert isinstance(claims["jti"], str) and len(claims["jti"]) == 32
    assert set(swap.signer.jwks()["keys"][0]) == {"kty", "crv", "x", "y", "kid", "use", "alg"}, "public members only"


async def test_a_token_is_reused_until_shortly_before_its_exp_then_renewed() -> None:
    clock = FakeClock(NOW)
    swap = tokens(clock)
    first = await swap.line(SIGNED, b"h1", "alice", NOW + 3600, "client")
    clock.advance(49)
    assert await swap.line(SIGNED, b"h1", "alice", NOW + 3600, "client") == first, "reused 10 s before its 60 s exp"
    assert await swap.line(SwapRule("other"), b"h1", "alice", NOW + 3600, "client") != first, "per audience"
    assert await swap.line(SIGNED, b"h2", "bob", NOW + 3600, "client") != first, "per client token"
    clock.advance(2)
    assert await swap.line(SIGNED, b"h1", "alice", NOW + 3600, "client") != first, "renewed past exp - 10 s"


async def test_the_internal_token_never_outlives_the_client_token() -> None:
    clock = FakeClock(NOW)
    swap = tokens(clock)
    assert swap.signer is not None
    first = await swap.line(SIGNED, b"h1", "alice", NOW + 20, "client")
    assert verify(bearer(first), swap.signer.jwks(), "legacy-billing")["exp"] == int(NOW) + 20
    clock.advance(19)
    assert await swap.line(SIGNED, b"h1", "alice", NOW + 20, "client") == first
    clock.advance(1)
    assert await swap.line(SIGNED, b"h1", "alice", NOW + 20, "client") != first, "not reused once the client token expired"


async def test_the_cache_is_bounded() -> None:
    swap = tokens(FakeClock(NOW), size=10)
    for index in range(25):
        await swap.line(SIGNED, f"h{index}".encode(), "alice", NOW + 3600, "client")
    assert len(swap._lines) <= 10


async def test_concurrent_misses_share_one_exchange_and_its_expires_in_bounds_reuse() -> None:
    clock = FakeClock(NOW)
    exchange = CountingExchange(expires_in=100)
    swap = tokens(clock, exchange=exchange)
    exchange.gate = asyncio.Event()
    waiting = [asyncio.create_task(swap.line(EXCHANGED, b"h1", "alice", NOW + 3600, "client")) for _ in range(20)]
    await asyncio.sleep(0)
    exchange.gate.set()
    lines = await asyncio.gather(*waiting)
    assert exchange.calls == 1 and set(lines) == {b"authorization: Bearer x-ledger-1\r\n"}
    clock.advance(89)
    assert await swap.line(EXCHANGED, b"h1", "alice", NOW + 3600, "client") == lines[0] and exchange.calls == 1
    clock.advance(2)
    await swap.line(EXCHANGED, b"h1", "alice", NOW + 3600, "client")
    assert exchange.calls == 2, "renewed 10 s before expires_in"


async def test_a_failed_exchange_is_503_for_the_client_and_not_cached() -> None:
    exchange = CountingExchange()
    exchange.fail = True
    swap = tokens(FakeClock(NOW), exchange=exchange)
    with pytest.raises(UpstreamTokenUnavailable) as caught:
        await swap.line(EXCHANGED, b"h1", "alice", NOW + 3600, "client-secret-token")
    status, headers, body = unavailable_parts(caught.value, "req-1")
    assert status == 424 and ("x-gatehouse-upstream-token", "unavailable") in headers and ("retry-after", "1") in headers
    assert b'"code":"upstream_token_unavailable"' in body and b'"reason":"connection"' in body
    assert b"client-secret-token" not in body
    exchange.fail = False
    assert await swap.line(EXCHANGED, b"h1", "alice", NOW + 3600, "client") == b"authorization: Bearer x-ledger-2\r\n"


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (503, b"{}", "http_status"),
        (200, b"not json", "bad_answer"),
        (200, b'{"token_type": "Bearer"}', "bad_answer"),
        (200, b'{"access_token": "a b"}', "bad_answer"),
        (200, b'{"access_token": "ok\\r\\nx-evil: 1"}', "bad_answer"),
        (200, b'{"access_token": "ok", "expires_in": -5}', "bad_answer"),
        (200, b'{"access_token": "ok", "expires_in": "60"}', "bad_answer"),
    ],
)
def test_an_unusable_exchange_answer_is_refused(status: int, body: bytes, reason: str) -> None:
    with pytest.raises(ExchangeFailed) as caught:
        parse_answer("http://sts/token", status, body)
    assert caught.value.reason == reason
    assert "x-evil" not in str(caught.value) and "a b" not in str(caught.value), "no answer content in the error"


def test_a_good_exchange_answer() -> None:
    answer = parse_answer("http://sts/token", 200, b'{"access_token": "abc.def", "issued_token_type": "urn:x", "expires_in": 120}')
    assert answer == Exchanged("abc.def", 120.0)


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        (ec.generate_private_key(ec.SECP384R1()), "must be on P-256 (ES256), not secp384r1"),
        (rsa.generate_private_key(public_exponent=65537, key_size=1024), "needs at least 2048 bits, not 1024"),
    ],
    ids=["p384", "rsa1024"],
)
def test_an_unusable_signing_key_is_refused_naming_the_file(tmp_path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey, reason: str) -> None:
    path = tmp_path / "signing.pem"
    path.write_bytes(pem(key))
    with pytest.raises(SigningKeyError, match=re.escape(str(path)) + ": .*" + re.escape(reason)):
        UpstreamSigner.from_file(path, issuer=ISS)


def test_a_signing_key_file_that_is_missing_or_not_a_key(tmp_path: Path) -> None:
    with pytest.raises(SigningKeyError, match="cannot read the signing key"):
        UpstreamSigner.from_file(tmp_path / "absent.pem", issuer=ISS)
    (tmp_path / "junk.pem").write_text("-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n")
    with pytest.raises(SigningKeyError, match="not an unencrypted PEM private key") as caught:
        UpstreamSigner.from_file(tmp_path / "junk.pem", issuer=ISS)
    assert "nope" not in str(caught.value)


def test_an_rsa_key_signs_rs256_and_the_kid_is_its_thumbprint(tmp_path: Path) -> None:
    path = tmp_path / "signing.pem"
    path.write_bytes(pem(rsa.generate_private_key(public_exponent=65537, key_size=2048)))
    loaded = UpstreamSigner.from_file(path, issuer=ISS)
    assert loaded.algorithm == "RS256" and len(loaded.key_id) == 43
    assert UpstreamSigner.from_file(path, issuer=ISS, key_id="gw-1").key_id == "gw-1"


def policy(route: str, audience: str, url: str = "") -> policy_pb2.RoutePolicy:
    found = policy_pb2.RoutePolicy(route=route)
    found.auth.SetInParent()
    found.upstream_token.audience = audience
    found.upstream_token.exchange_url = url
    return found


GRANTS = SwapGrants({"legacy": frozenset({"b", "l"}), "*": frozenset({"reports"})}, frozenset({"https://sts/token"}))


def test_a_swap_route_this_process_cannot_serve_is_a_refusal() -> None:
    billing, ledger, plain = policy("legacy/billing", "b"), policy("legacy/ledger", "l", "https://sts/token"), policy_pb2.RoutePolicy(route="shop/x")
    assert [swap_refusal(p, None) for p in (billing, ledger, plain)] == [
        "auth.upstreamToken: ext_authz has no http.upstreamTokens", "auth.upstreamToken: ext_authz has no http.upstreamTokens", None,
    ]
    no_key = UpstreamTokens(signer=None, exchange=CountingExchange(), ttl=60, cache_size=10, grants=GRANTS)
    assert swap_refusal(billing, no_key) == "auth.upstreamToken: needs a signed token and http.upstreamTokens has no keyFile"
    assert swap_refusal(ledger, no_key) is None
    able = UpstreamTokens(signer=signer(), exchange=CountingExchange(), ttl=60, cache_size=10, grants=GRANTS)
    assert [swap_refusal(p, able) for p in (billing, ledger, plain)] == [None, None, None]


def test_a_route_may_ask_only_for_its_namespaces_audiences_and_listed_endpoints() -> None:
    """A route author writes the audience and the exchange URL; the operator's list decides."""
    able = UpstreamTokens(signer=signer(), exchange=CountingExchange(), ttl=60, cache_size=10, grants=GRANTS)
    stolen = swap_refusal(policy("evil/grab", "b"), able)
    assert stolen == ("auth.upstreamToken: audience 'b' is not one routes in namespace 'evil' may ask for "
                      "(ext_authz http.upstreamTokens.audiences)")
    assert swap_refusal(policy("evil/reports", "reports"), able) is None, "'*' grants every namespace"
    leak = swap_refusal(policy("legacy/billing", "b", "https://evil.example/collect"), able)
    assert leak is not None and "is not a listed endpoint" in leak
    none = UpstreamTokens(signer=signer(), exchange=CountingExchange(), ttl=60, cache_size=10)
    assert swap_refusal(policy("legacy/billing", "b"), none) is not None, "no list: no audience at all"


async def test_a_client_token_without_sub_gets_no_signed_token() -> None:
    swap = tokens(FakeClock(NOW))
    with pytest.raises(ForbiddenError) as caught:
        await swap.line(SIGNED, b"h1", "", NOW + 3600, "client")
    assert (caught.value.status, caught.value.reason) == (403, "no_subject")


async def test_an_exchange_whose_caller_went_away_still_caches_its_token() -> None:
    """Envoy gave up on the check (its timeout): the call finishes and the next check is warm."""
    exchange = CountingExchange()
    exchange.gate = asyncio.Event()
    swap = tokens(FakeClock(NOW), exchange=exchange)
    caller = asyncio.create_task(swap.line(EXCHANGED, b"h1", "alice", NOW + 3600, "client"))
    await asyncio.sleep(0)
    caller.cancel()
    exchange.gate.set()
    for _ in range(5):
        await asyncio.sleep(0)
    assert swap.cached(EXCHANGED, b"h1") == b"authorization: Bearer x-ledger-1\r\n" and exchange.calls == 1
