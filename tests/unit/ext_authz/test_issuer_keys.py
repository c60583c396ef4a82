"""IssuerKeys with a fake clock and a fake source: TTL clamping, the unknown-kid cooldown,
failures that keep keys (bounded by maxStale), and which JWKs are ever loaded."""

from __future__ import annotations

import asyncio
import os
import secrets
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from ext_authz.errors import TokenError, UnavailableError
from ext_authz.tokens.jwks import IssuerKeys, cache_max_age, is_safe_kid, key_from_jwk, load_jwks
from tests.unit.ext_authz.signing import FakeClock, FakeSource, b64url, ec_key, issuer, rsa_key

MIN_TTL, MAX_TTL, COOLDOWN, MAX_STALE = 300.0, 86_400.0, 30.0, 86_400.0
ALL = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"})


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1000.0)


@pytest.fixture
def source() -> FakeSource:
    return FakeSource(rsa_key().jwk(), ec_key().jwk())


@pytest.fixture
def keys(source: FakeSource, clock: FakeClock) -> IssuerKeys:
    return IssuerKeys(issuer(), source, clock=clock)


# --- Cache-Control --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cache_control", "age", "expected"),
    [
        ("max-age=600", None, 600.0),
        ("public, max-age=600, must-revalidate", None, 600.0),
        ("Public, Max-Age=600", None, 600.0),
        ('max-age="60"', None, 60.0),
        ("max-age=600", "100", 500.0),
        ("max-age=600", "900", 0.0),
        ("no-store", None, 0.0),
        ("max-age=600, no-cache", None, 0.0),
        ("max-age=-5", None, None),
        ("max-age=abc", None, None),
        ("public", None, None),
        ("", None, None),
        (None, None, None),
    ],
)
def test_cache_control_max_age(cache_control: str | None, age: str | None, expected: float | None) -> None:
    assert cache_max_age(cache_control, age) == expected


@pytest.mark.parametrize(
    ("max_age", "ttl"),
    [(1.0, MIN_TTL), (0.0, MIN_TTL), (None, MIN_TTL), (3600.0, 3600.0), (10.0**9, MAX_TTL)],
    ids=["below-floor", "zero", "absent", "inside", "above-ceiling"],
)
async def test_max_age_is_clamped_to_the_floor_and_ceiling(
    keys: IssuerKeys, source: FakeSource, clock: FakeClock, max_age: float | None, ttl: float
) -> None:
    source.max_age = max_age
    assert await keys.refresh()
    assert keys.expires_at == clock.now + ttl
    assert keys.refresh_at == pytest.approx(clock.now + 0.8 * ttl)  # before expiry


# --- the unknown-kid cooldown -----------------------------------------------------------------


async def test_a_flood_of_random_kids_causes_one_fetch(keys: IssuerKeys, source: FakeSource, clock: FakeClock) -> None:
    await keys.refresh()
    assert source.calls == 1
    source.gate = asyncio.Event()  # hold the refetch open so the flood arrives while it is in flight
    flood = [asyncio.create_task(keys.key_for(secrets.token_urlsafe(12), "RS256")) for _ in range(500)]
    await asyncio.sleep(0)
    source.gate.set()
    results = await asyncio.gather(*flood, return_exceptions=True)
    assert all(isinstance(r, TokenError) and r.reason == "unknown_kid" for r in results)
    assert source.calls == 2 and keys.unknown_kid_refetches == 1
    # A second wave within the cooldown costs nothing at all.
    source.gate = None
    for _ in range(500):
        with pytest.raises(TokenError):
            await keys.key_for(secrets.token_urlsafe(12), "RS256")
    assert source.calls == 2
    clock.advance(COOLDOWN - 0.001)
    with pytest.raises(TokenError):
        await keys.key_for("still-cooling", "RS256")
    assert source.calls == 2
    clock.advance(0.001)
    with pytest.raises(TokenError):
        await keys.key_for("after-cooldown", "RS256")
    assert source.calls == 3


async def test_an_unknown_kid_picks_up_a_rotated_key(keys: IssuerKeys, source: FakeSource, clock: FakeClock) -> None:
    await keys.refresh()
    new = rsa_key("rsa-2")
    source.document["keys"].append(new.jwk())
    pyjwk = await keys.key_for("rsa-2", "RS256")
    assert pyjwk.key_id == "rsa-2" and source.calls == 2
    assert keys.kids == {"rsa-1", "ec-1", "rsa-2"}


async def test_known_kids_never_cause_a_fetch(keys: IssuerKeys, source: FakeSource) -> None:
    await keys.refresh()
    for _ in range(100):
        assert (await keys.key_for("rsa-1", "RS256")).key_id == "rsa-1"
    assert source.calls == 1


async def test_a_cancelled_waiter_does_not_cancel_the_shared_fetch(keys: IssuerKeys, source: FakeSource) -> None:
    await keys.refresh()
    source.gate = asyncio.Event()
    source.document["keys"].append(rsa_key("rsa-2").jwk())
    first = asyncio.create_task(keys.key_for("rsa-2", "RS256"))
    second = asyncio.create_task(keys.key_for("rsa-2", "RS256"))
    await asyncio.sleep(0)
    first.cancel()
    source.gate.set()
    assert (await second).key_id == "rsa-2"
    assert source.calls == 2


# --- failures keep the keys, within max_stale ---------------------------------------------------


async def test_a_failed_fetch_keeps_the_good_keys(keys: IssuerKeys, source: FakeSource, clock: FakeClock) -> None:
    assert await keys.refresh()
    source.fail = True
    assert not await keys.refresh()
    assert keys.fetch_errors == 1 and keys.has_keys
    assert (await keys.key_for("rsa-1", "RS256")).key_id == "rsa-1"
    clock.advance(MIN_TTL + 1)  # expired, still inside max_stale
    assert not await keys.refresh()
    assert keys.has_keys and (await keys.key_for("ec-1", "ES256")).key_id == "ec-1"


async def test_failures_are_retried_with_backoff(keys: IssuerKeys, source: FakeSource, clock: FakeClock) -> None:
    source.fail = True
    delays = []
    for _ in range(9):
        await keys.refresh()
        delays.append(keys.refresh_at - clock.now)
    assert 0.5 <= delays[0] <= 1.0
    assert 1.0 <= delays[1] <= 2.0
    assert all(b >= a / 2 for a, b in zip(delays, delays[1:], strict=False))
    assert 30.0 <= delays[-1] <= 60.0  # capped


async def test_stale_beyond_max_stale_means_no_keys(keys: IssuerKeys, source: FakeSource, clock: FakeClock) -> None:
    assert await keys.refresh()
    source.fail = True
    clock.advance(MIN_TTL + MAX_STALE - 0.001)
    assert keys.has_keys
    clock.advance(0.001)
    assert not keys.has_keys
    with pytest.raises(UnavailableError) as info:
        await keys.key_for("rsa-1", "RS256")
    assert info.value.reason == "no_keys"
    source.fail = False  # the IdP is back: the next refetch (after the cooldown) restores them
    clock.advance(COOLDOWN)
    assert (await keys.key_for("rsa-1", "RS256")).key_id == "rsa-1"
    assert keys.has_keys


async def test_a_document_without_usable_keys_is_a_failure(keys: IssuerKeys, source: FakeSource) -> None:
    assert await keys.refresh()
    source.document = {"keys": [{"kty": "oct", "k": b64url(b"secret" * 8), "kid": "rsa-1"}]}
    assert not await keys.refresh()
    assert keys.fetch_errors == 1
    assert (await keys.key_for("rsa-1", "RS256")).key_id == "rsa-1"
    source.document = {"not": "a jwks"}
    assert not await keys.refresh()
    assert keys.fetch_errors == 2 and keys.has_keys


async def test_no_keys_before_any_successful_fetch(keys: IssuerKeys, source: FakeSource) -> None:
    assert not keys.has_keys
    source.fail = True
    await keys.start()  # does not raise
    try:
        assert not keys.has_keys
        with pytest.raises(UnavailableError):
            await keys.key_for("rsa-1", "RS256")
    finally:
        await keys.close()


# --- which keys are loaded ---------------------------------------------------------------------


async def test_oct_keys_are_ignored(keys: IssuerKeys, source: FakeSource) -> None:
    source.document["keys"].append({"kty": "oct", "k": b64url(rsa_key().public_pem), "kid": "hmac", "alg": "HS256"})
    assert await keys.refresh()
    assert keys.kids == {"rsa-1", "ec-1"} and keys.keys_ignored == 1
    with pytest.raises(TokenError) as info:
        await keys.key_for("hmac", "RS256")
    assert info.value.reason == "unknown_kid"
    with pytest.raises(TokenError) as info:
        await keys.key_for("hmac", "HS256")
    assert info.value.reason == "alg_not_allowed"


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ({"use": "enc"}, "encryption key"),
        ({"use": 5}, "odd use"),
        ({"key_ops": ["encrypt"]}, "key_ops without verify"),
        ({"key_ops": "verify"}, "key_ops not a list"),
        ({"alg": "HS256"}, "HMAC alg on an RSA key"),
        ({"alg": "ES256"}, "EC alg on an RSA key"),
        ({"alg": ["RS256"]}, "alg not a string"),
        ({"kid": "../keys/a"}, "path-like kid"),
        ({"kid": "k" * 300}, "kid too long"),
        ({"kty": "RSA ", "kid": "x"}, "unknown kty"),
        ({"n": "!!!"}, "not a key"),
    ],
)
def test_unusable_jwks_entries_are_skipped(entry: dict[str, Any], why: str) -> None:
    jwk = {**rsa_key().jwk(), **entry}
    assert key_from_jwk(jwk, ALL) is None, why


def test_only_public_members_are_loaded() -> None:
    private = rsa_key().private
    jwk = RSAAlgorithm.to_jwk(private, as_dict=True) | {"kid": "leaked"}
    assert "d" in jwk
    assert key_from_jwk(jwk, ALL) is None  # key_ops: [sign] is not a verification key
    del jwk["key_ops"]
    key = key_from_jwk(jwk, ALL)
    assert key is not None and isinstance(key.jwk.key, rsa.RSAPublicKey)
    ec_private = ECAlgorithm.to_jwk(ec_key().private, as_dict=True) | {"kid": "leaked-ec"}
    assert "d" in ec_private
    ec_loaded = key_from_jwk(ec_private, ALL)
    assert ec_loaded is not None and isinstance(ec_loaded.jwk.key, ec.EllipticCurvePublicKey)


def test_short_rsa_keys_are_skipped() -> None:
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    jwk = RSAAlgorithm.to_jwk(weak.public_key(), as_dict=True) | {"kid": "weak"}
    assert key_from_jwk(jwk, ALL) is None


@pytest.mark.parametrize(
    ("extra", "allowed", "expected"),
    [
        ({}, ALL, {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}),
        ({}, frozenset({"RS256", "ES256"}), {"RS256"}),
        ({"alg": "PS384"}, ALL, {"PS384"}),
        ({"alg": "PS384"}, frozenset({"RS256"}), None),
    ],
)
def test_a_key_remembers_the_algorithms_it_may_verify(
    extra: dict[str, Any], allowed: frozenset[str], expected: set[str] | None
) -> None:
    key = key_from_jwk(rsa_key().jwk(**extra), allowed)
    assert (key.algorithms if key else None) == expected


@pytest.mark.parametrize(
    ("curve", "alg"), [(ec.SECP256R1(), "ES256"), (ec.SECP384R1(), "ES384"), (ec.SECP521R1(), "ES512")]
)
def test_ec_keys_verify_only_their_curves_algorithm(curve: ec.EllipticCurve, alg: str) -> None:
    jwk = ECAlgorithm.to_jwk(ec.generate_private_key(curve).public_key(), as_dict=True)
    key = key_from_jwk(jwk, ALL)
    assert key is not None and key.algorithms == {alg}


def test_okp_keys_verify_eddsa() -> None:
    from cryptography.hazmat.primitives.asymmetric import ed25519
    from jwt.algorithms import OKPAlgorithm

    jwk = OKPAlgorithm.to_jwk(ed25519.Ed25519PrivateKey.generate().public_key(), as_dict=True)
    key = key_from_jwk(jwk, ALL)
    assert key is not None and key.algorithms == {"EdDSA"}
    assert key_from_jwk(jwk, frozenset({"RS256"})) is None


def test_the_first_of_two_keys_with_one_kid_wins() -> None:
    first, second = rsa_key().jwk(), rsa_key("other-rsa").jwk(kid="rsa-1")
    keys, ignored = load_jwks({"keys": [first, second, "junk"]}, ALL)
    assert [k.kid for k in keys] == ["rsa-1"] and ignored == 2
    assert keys[0].jwk.key.public_numbers().n == rsa_key().private.public_key().public_numbers().n


@pytest.mark.parametrize("document", [[], {"keys": "x"}, {"keys": {}}, "keys", None])
def test_not_a_jwks_is_an_error(document: object) -> None:
    with pytest.raises(ValueError):
        load_jwks(document, ALL)


@pytest.mark.parametrize(
    ("kid", "safe"),
    [
        ("rsa-1", True),
        ("NkFCNEUyRjdDMDZCMzdGMzc4QjlGOUY1QjM4MjU1OTM0QjQ5MDBBRg", True),
        ("2024-01:signing.key=1+", True),
        ("k" * 256, True),
        ("k" * 257, False),
        ("", False),
        ("a/b", False),
        ("a\\b", False),
        ("..", False),
        ("a b", False),
        ("é", False),
        (None, False),
        (5, False),
    ],
)
def test_safe_kid(kid: object, safe: bool) -> None:
    assert is_safe_kid(kid) is safe


# --- kid-less tokens ---------------------------------------------------------------------------


async def test_a_token_without_kid_needs_exactly_one_candidate_key(clock: FakeClock) -> None:
    one = IssuerKeys(issuer(), FakeSource(rsa_key().jwk()), clock=clock)
    await one.refresh()
    assert (await one.key_for(None, "RS256")).key_id == "rsa-1"
    with pytest.raises(TokenError) as info:
        await one.key_for(None, "ES256")  # the only key, but the wrong family
    assert info.value.reason == "alg_not_allowed"
    mixed = IssuerKeys(issuer(), FakeSource(rsa_key().jwk(), ec_key().jwk()), clock=clock)
    await mixed.refresh()
    assert (await mixed.key_for(None, "ES256")).key_id == "ec-1"
    two_rsa = FakeSource(rsa_key().jwk(), rsa_key("other-rsa").jwk())
    ambiguous = IssuerKeys(issuer(), two_rsa, clock=clock)
    await ambiguous.refresh()
    with pytest.raises(TokenError) as info:
        await ambiguous.key_for(None, "RS256")
    assert info.value.reason == "unknown_kid" and two_rsa.calls == 1  # no refetch for a missing kid


# --- background refresh and the file source ------------------------------------------------------


async def test_the_background_task_refreshes_before_expiry(source: FakeSource, clock: FakeClock) -> None:
    slept: list[float] = []
    done = asyncio.Event()

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(seconds)
        if len(slept) == 3:
            done.set()
            await asyncio.Event().wait()  # park the loop here

    source.max_age = 1000.0
    keys = IssuerKeys(issuer(), source, clock=clock, sleep=sleep)
    await keys.start()
    await asyncio.wait_for(done.wait(), 5)
    await keys.close()
    assert slept == [pytest.approx(800.0)] * 3
    assert source.calls == 3  # the first load, then one refresh per 800 s


async def test_a_jwks_file_is_reread_when_its_mtime_changes(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "keys.json"
    path.write_text('{"keys": [%s]}' % _json(rsa_key().jwk()))
    keys = IssuerKeys.from_config(issuer(jwksUrl=None, jwksFile="keys.json"), session=None, base_dir=tmp_path, clock=clock)
    assert await keys.refresh()
    assert keys.kids == {"rsa-1"}
    assert await keys.refresh()  # unchanged: confirmed without a reload
    path.write_text('{"keys": [%s, %s]}' % (_json(rsa_key().jwk()), _json(ec_key().jwk())))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert await keys.refresh()
    assert keys.kids == {"rsa-1", "ec-1"}
    path.write_text("{broken")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 2_000_000))
    assert not await keys.refresh()
    assert keys.kids == {"rsa-1", "ec-1"} and keys.has_keys
    path.unlink()
    assert not await keys.refresh()
    assert keys.has_keys and keys.fetch_errors == 2


def test_a_jwks_url_needs_a_session() -> None:
    with pytest.raises(ValueError):
        IssuerKeys.from_config(issuer(), session=None)


def _json(data: dict[str, Any]) -> str:
    import json

    return json.dumps(data)
