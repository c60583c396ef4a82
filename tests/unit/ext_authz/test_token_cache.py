"""TokenCache (bounded LRU, entries no older than exp or max_age) and how TokenVerifier uses it:
a hit skips the signature, never the clock."""

from __future__ import annotations

from typing import Any

import pytest

from ext_authz.errors import TokenError, UnavailableError
from ext_authz.tokens.jwks import IssuerKeys
from ext_authz.tokens.cache import TokenCache, token_digest
import ext_authz.tokens.verifier as tokens_module
from ext_authz.tokens.verifier import TokenVerifier
from tests.unit.ext_authz.signing import NOW, FakeClock, FakeSource, claims, ec_key, issuer, rsa_key

# --- TokenCache ------------------------------------------------------------------------------


def d(n: int) -> bytes:
    return token_digest(f"token-{n}")


def test_get_returns_what_put_stored_until_it_expires() -> None:
    cache: TokenCache[str] = TokenCache(10, max_age=300)
    cache.put(d(1), "one", expires_at=100.0, now=50.0)
    assert cache.get(d(1), 99.999) == "one"
    assert cache.get(d(1), 100.0) is None  # exactly at exp: gone
    assert len(cache) == 0  # and dropped, not just hidden


def test_max_age_caps_an_entry_with_a_far_exp() -> None:
    cache: TokenCache[str] = TokenCache(10, max_age=60)
    cache.put(d(1), "one", expires_at=10_000.0, now=0.0)
    assert cache.get(d(1), 59.0) == "one"
    assert cache.get(d(1), 60.0) is None


def test_an_already_expired_value_is_not_stored() -> None:
    cache: TokenCache[str] = TokenCache(10)
    cache.put(d(1), "one", expires_at=100.0, now=100.0)
    cache.put(d(2), "two", expires_at=99.0, now=100.0)
    assert len(cache) == 0


def test_the_least_recently_used_entry_is_evicted_first() -> None:
    cache: TokenCache[int] = TokenCache(3)
    for n in range(3):
        cache.put(d(n), n, expires_at=1000.0, now=0.0)
    assert cache.get(d(0), 1.0) == 0  # 0 is now the most recent
    cache.put(d(3), 3, expires_at=1000.0, now=1.0)
    assert cache.get(d(1), 1.0) is None  # 1 was the least recent
    assert [cache.get(d(n), 1.0) for n in (0, 2, 3)] == [0, 2, 3]
    assert len(cache) == 3


def test_the_byte_budget_bounds_memory() -> None:
    cache: TokenCache[int] = TokenCache(100, max_bytes=1000)
    for n in range(10):
        cache.put(d(n), n, expires_at=1000.0, now=0.0, size=300)
    assert len(cache) == 3 and cache.size_bytes == 900
    assert [cache.get(d(n), 0.0) for n in (7, 8, 9)] == [7, 8, 9]
    cache.put(d(99), 99, expires_at=1000.0, now=0.0, size=1001)  # larger than the whole budget
    assert cache.get(d(99), 0.0) is None and cache.size_bytes == 900


def test_replacing_and_discarding_keep_the_accounting_right() -> None:
    cache: TokenCache[int] = TokenCache(10, max_bytes=1000)
    cache.put(d(1), 1, expires_at=1000.0, now=0.0, size=400)
    cache.put(d(1), 2, expires_at=1000.0, now=0.0, size=100)
    assert cache.get(d(1), 0.0) == 2 and cache.size_bytes == 100 and len(cache) == 1
    cache.discard(d(1))
    cache.discard(d(1))
    assert cache.size_bytes == 0 and len(cache) == 0


def test_size_zero_disables_the_cache() -> None:
    cache: TokenCache[int] = TokenCache(0)
    cache.put(d(1), 1, expires_at=1000.0, now=0.0)
    assert cache.get(d(1), 0.0) is None


def test_many_puts_stay_bounded() -> None:
    cache: TokenCache[int] = TokenCache(1000)
    for n in range(20_000):
        cache.put(n.to_bytes(32, "big"), n, expires_at=1e9, now=0.0)
    assert len(cache) == 1000
    assert cache.get((19_999).to_bytes(32, "big"), 0.0) == 19_999
    assert cache.get((18_999).to_bytes(32, "big"), 0.0) is None


# --- the verifier's use of it -----------------------------------------------------------------


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW)


@pytest.fixture
def mono() -> FakeClock:
    return FakeClock(100.0)


@pytest.fixture
def source() -> FakeSource:
    return FakeSource(rsa_key().jwk(), ec_key().jwk())


@pytest.fixture
async def keys(source: FakeSource, mono: FakeClock) -> IssuerKeys:
    keys = IssuerKeys(issuer(), source, clock=mono)
    assert await keys.refresh()
    return keys


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every signature check the verifier makes."""
    calls: list[str] = []
    real = tokens_module._check_signature

    def counting(signing_input: bytes, *args: Any, **kwargs: Any) -> Any:
        calls.append(signing_input.decode())
        return real(signing_input, *args, **kwargs)

    monkeypatch.setattr(tokens_module, "_check_signature", counting)
    return calls


def make(keys: IssuerKeys, clock: FakeClock, **kwargs: Any) -> TokenVerifier:
    return TokenVerifier([keys], cache_size=kwargs.pop("cache_size", 100), max_token_bytes=8192, clock=clock, **kwargs)


async def test_a_repeat_token_skips_the_signature(keys: IssuerKeys, clock: FakeClock, decodes: list[str]) -> None:
    verifier = make(keys, clock)
    token = rsa_key().sign(claims())
    first = await verifier.verify(f"Bearer {token}")
    second = await verifier.verify(f"Bearer {token}")
    assert second is first
    assert len(decodes) == 1 and verifier.cache_hits == 1 and verifier.verifications == 1


async def test_a_hit_still_checks_exp_on_the_clock(keys: IssuerKeys, clock: FakeClock, decodes: list[str]) -> None:
    verifier = make(keys, clock)
    token = rsa_key().sign(claims(exp=int(NOW) + 60))
    await verifier.verify(f"Bearer {token}")
    clock.advance(60)  # at exp: the entry is gone; full verification still accepts within the leeway
    assert (await verifier.verify(f"Bearer {token}")).subject == "user-1"
    assert len(decodes) == 2 and verifier.cache_hits == 0
    clock.advance(30)  # past the leeway
    with pytest.raises(TokenError) as info:
        await verifier.verify(f"Bearer {token}")
    assert info.value.reason == "expired"


async def test_a_hit_never_outlives_max_age(keys: IssuerKeys, clock: FakeClock, decodes: list[str]) -> None:
    verifier = make(keys, clock, cache_max_age=10)
    token = rsa_key().sign(claims())
    await verifier.verify(f"Bearer {token}")
    clock.advance(9)
    await verifier.verify(f"Bearer {token}")
    clock.advance(1)
    await verifier.verify(f"Bearer {token}")
    assert len(decodes) == 2 and verifier.cache_hits == 1


async def test_a_tampered_copy_of_a_cached_token_is_not_a_hit(keys: IssuerKeys, clock: FakeClock) -> None:
    verifier = make(keys, clock)
    token = rsa_key().sign(claims())
    await verifier.verify(f"Bearer {token}")
    head, payload, sig = token.split(".")
    other = rsa_key().sign(claims(sub="user-2")).split(".")[1]
    with pytest.raises(TokenError) as info:
        await verifier.verify(f"Bearer {head}.{other}.{sig}")
    assert info.value.reason == "bad_signature"


async def test_a_key_dropped_from_the_jwks_stops_its_cached_tokens(
    keys: IssuerKeys, clock: FakeClock, source: FakeSource, mono: FakeClock
) -> None:
    verifier = make(keys, clock)
    token = rsa_key().sign(claims())
    await verifier.verify(f"Bearer {token}")
    source.document = {"keys": [ec_key().jwk()]}  # rsa-1 rotated out
    assert await keys.refresh()
    with pytest.raises(TokenError) as info:
        await verifier.verify(f"Bearer {token}")
    assert info.value.reason == "unknown_kid"
    assert verifier.cache_hits == 0


async def test_keys_stale_beyond_max_stale_stop_cached_tokens(
    keys: IssuerKeys, clock: FakeClock, source: FakeSource, mono: FakeClock
) -> None:
    verifier = make(keys, clock)
    token = rsa_key().sign(claims(exp=int(NOW) + 10**7))
    await verifier.verify(f"Bearer {token}")
    source.fail = True
    mono.advance(keys.expires_at - mono.now + 86_400 + 1)  # min TTL, then a day of max_stale
    with pytest.raises(UnavailableError) as info:
        await verifier.verify(f"Bearer {token}")
    assert info.value.reason == "no_keys"


async def test_cache_size_zero_verifies_every_time(keys: IssuerKeys, clock: FakeClock, decodes: list[str]) -> None:
    verifier = make(keys, clock, cache_size=0)
    token = rsa_key().sign(claims())
    for _ in range(3):
        await verifier.verify(f"Bearer {token}")
    assert len(decodes) == 3 and verifier.cache_hits == 0


async def test_a_denied_token_is_never_accepted_and_a_stable_failure_is_remembered(
    keys: IssuerKeys, clock: FakeClock, decodes: list[str]
) -> None:
    verifier = make(keys, clock)
    token = rsa_key().sign(claims(aud="other"))
    for _ in range(3):
        with pytest.raises(TokenError) as info:
            await verifier.verify(f"Bearer {token}")
        assert info.value.reason == "audience"
    assert len(decodes) == 1, "a replayed bad token must not cost a signature check each time"
    clock.advance(61)  # remembered for a minute only
    with pytest.raises(TokenError):
        await verifier.verify(f"Bearer {token}")
    assert len(decodes) == 2


async def test_a_time_dependent_failure_is_not_remembered(keys: IssuerKeys, clock: FakeClock, decodes: list[str]) -> None:
    verifier = make(keys, clock)
    token = rsa_key().sign(claims(nbf=int(NOW) + 120))
    with pytest.raises(TokenError) as info:
        await verifier.verify(f"Bearer {token}")
    assert info.value.reason == "not_yet_valid"
    clock.advance(120)
    assert (await verifier.verify(f"Bearer {token}")).subject == "user-1"
