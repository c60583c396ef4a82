"""LocalStore: the in-memory limiter (fallback at limit ÷ instances) and reservation backend."""

from __future__ import annotations

from limiter.local import LocalStore

from tests.unit.limiter.specs import FakeClock, spec


async def burst(store: LocalStore, s: object, key: str, n: int) -> int:
    return sum([(await store.hit(s, key)).allowed for _ in range(n)])  # type: ignore[arg-type]


async def test_enforces_limit_divided_by_expected_instances() -> None:
    clock = FakeClock()
    store = LocalStore(expected_instances=4, clock_ms=clock.ms)
    s = spec("fixedWindow", 100, 60_000)
    assert await burst(store, s, "k", 200) == 25
    d = await store.hit(s, "k")
    assert (d.allowed, d.limit, d.remaining, d.source) == (False, 25, 0, "local")
    clock.advance(60_000)
    assert await burst(store, s, "k", 200) == 25


async def test_windows_follow_the_clock_and_keys_are_separate() -> None:
    clock = FakeClock()
    store = LocalStore(clock_ms=clock.ms)
    s = spec("slidingWindow", 10, 1000)
    assert await burst(store, s, "a", 20) == 10
    assert await burst(store, s, "b", 20) == 10
    clock.advance(1500)
    assert await burst(store, s, "a", 20) == 5  # 10 × 0.5 still counts


async def test_token_bucket_refills() -> None:
    clock = FakeClock()
    store = LocalStore(clock_ms=clock.ms)
    s = spec("tokenBucket", 3, 500, refill=1)
    assert await burst(store, s, "k", 5) == 3
    denied = await store.hit(s, "k")
    assert denied.reset_after == 0.5
    clock.advance(500)
    assert await burst(store, s, "k", 5) == 1


async def test_forgets_only_what_is_back_to_fresh() -> None:
    clock = FakeClock()
    store = LocalStore(clock_ms=clock.ms, sweep_every=1)
    live, done = spec("fixedWindow", 5, 10_000), spec("fixedWindow", 5, 1000)
    await store.hit(done, "k")
    clock.advance(1000)
    await store.hit(live, "k")
    assert len(store) == 1  # the ended window went, the live one stays
    assert (await store.hit(live, "k")).remaining == 3


async def test_reservations_are_tagged_and_released_only_in_their_window() -> None:
    clock = FakeClock()
    store = LocalStore(clock_ms=clock.ms)
    s = spec("fixedWindow", 10, 1000)
    grant = await store.reserve(s, "k", need=1, max_batch=4, divisor=1, instance="a")
    assert (grant.granted, grant.remaining, grant.tag_left_ms) == (4, 6, 1000)
    assert await store.release(s, "k", tag=grant.tag, tokens=9, instance="b") == 0  # not b's
    assert await store.release(s, "k", tag=grant.tag, tokens=9, instance="a") == 4  # at most what a holds
    assert (await store.hit(s, "k")).remaining == 9
    grant = await store.reserve(s, "k", need=1, max_batch=4, divisor=1, instance="a")
    clock.advance(1000)
    assert await store.release(s, "k", tag=grant.tag, tokens=4, instance="a") == 0  # the window ended
    assert (await store.hit(s, "k")).remaining == 9
