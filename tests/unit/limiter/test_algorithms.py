"""The algorithm maths (pure), including the boundary-burst scenario from issue 5."""

from __future__ import annotations

import random

import pytest

from limiter import algorithms as alg
from limiter.model import Algorithm, LimitSpec

from tests.unit.limiter.specs import spec

MINUTE = 60_000
T0 = 1_000_000 * MINUTE  # a window boundary (for 60 s windows)


class Counter:
    """One counter driven through the pure functions, like a store would."""

    def __init__(self, s: LimitSpec) -> None:
        self.spec = s
        self.stored: alg.Stored | None = None
        self.expires = 0

    def view(self, now: int) -> alg.View:
        stored = self.stored if self.stored is not None and now < self.expires else None
        return alg.observe(self.spec, stored, now)

    def hit(self, now: int, cost: int = 1) -> alg.Outcome:
        outcome, write = alg.hit(self.spec, self.view(now), cost)
        if write is not None:
            self.stored, ttl = write
            self.expires = now + ttl
        return outcome

    def burst(self, now: int, n: int) -> int:
        return sum(self.hit(now).allowed for _ in range(n))


def test_boundary_burst_fixed_window_passes_200() -> None:
    counter = Counter(spec("fixedWindow", 100, MINUTE))
    assert counter.burst(T0 + 59_000, 100) == 100
    assert counter.burst(T0 + 60_000, 100) == 100  # a new window: 200 in one second


def test_boundary_burst_sliding_window_passes_only_its_estimate() -> None:
    counter = Counter(spec("slidingWindow", 100, MINUTE))
    assert counter.burst(T0 + 59_000, 100) == 100  # previous window empty: estimate 0 + hits
    # At t = 60 s the previous window (100) still weighs 100 %: estimate 100, nothing passes.
    assert counter.burst(T0 + 60_000, 100) == 0
    # and as its weight fades, exactly floor(100 × elapsed fraction) pass in total:
    assert counter.burst(T0 + 60_600, 100) == 1  # 100 × 0.99 + 0 = 99 → 1
    assert counter.burst(T0 + 66_000, 100) == 9  # 100 × 0.9 = 90 → 10 in all, 1 already
    assert counter.burst(T0 + 90_000, 100) == 40  # 100 × 0.5 = 50 → 50 in all
    assert counter.view(T0 + 90_000).current == 50


def test_boundary_burst_sliding_window_retry_after_is_exact() -> None:
    counter = Counter(spec("slidingWindow", 100, MINUTE))
    counter.burst(T0 + 59_000, 100)
    denied = counter.hit(T0 + 60_000)
    assert not denied.allowed and denied.remaining == 0
    assert denied.after_ms == 600  # at 60.6 s: 100 × 59.4/60 = 99 → room for one
    assert not counter.hit(T0 + 60_599).allowed
    assert counter.hit(T0 + 60_600).allowed


def test_sliding_estimate_formula() -> None:
    s = spec("slidingWindow", 100, 1000)
    view = alg.View(now=T0 + 250, index=T0 // 1000, elapsed=250, current=20, previous=40)
    # 40 × 750/1000 + 20 = 50 → 50 remaining
    assert alg.available(s, view) == 50
    view = alg.View(now=T0 + 1, index=T0 // 1000, elapsed=1, current=0, previous=100)
    assert alg.available(s, view) == 0  # 100 × 999/1000 = 99.9 → floor(0.1) = 0


def test_token_bucket_capacity_and_refill_exactly() -> None:
    counter = Counter(spec("tokenBucket", 5, 10_000, refill=1))  # capacity 5, 1 per 10 s
    assert counter.burst(T0, 10) == 5
    denied = counter.hit(T0 + 1)
    assert denied.after_ms == 9_999  # the clock started at the first draw from the full bucket
    assert not counter.hit(T0 + 9_999).allowed
    assert counter.hit(T0 + 10_000).allowed
    assert not counter.hit(T0 + 10_000).allowed
    assert counter.burst(T0 + 30_000, 10) == 2  # two more steps: 20 s, 30 s
    assert counter.burst(T0 + 1_000_000, 10) == 5  # never more than capacity


def test_token_bucket_refill_several_tokens_per_step() -> None:
    counter = Counter(spec("tokenBucket", 10, 1000, refill=3))
    assert counter.burst(T0, 20) == 10
    assert counter.burst(T0 + 999, 5) == 0
    assert counter.burst(T0 + 1000, 5) == 3
    assert counter.burst(T0 + 3500, 20) == 6  # steps at 2 s and 3 s
    outcome = counter.hit(T0 + 3500)
    assert outcome.after_ms == 500


def test_fixed_window_counts_per_window() -> None:
    counter = Counter(spec("fixedWindow", 3, 1000))
    assert counter.burst(T0 + 10, 5) == 3
    denied = counter.hit(T0 + 400)
    assert denied.after_ms == 600  # until the window ends
    assert counter.burst(T0 + 1000, 5) == 3


@pytest.mark.parametrize("algorithm", ["fixedWindow", "slidingWindow", "tokenBucket"])
def test_denied_hits_do_not_count(algorithm: Algorithm) -> None:
    counter = Counter(spec(algorithm, 5, 1000))
    assert counter.burst(T0, 3) == 3
    assert not counter.hit(T0, cost=3).allowed
    for _ in range(50):
        counter.hit(T0, cost=3)
    assert counter.hit(T0, cost=2).allowed
    assert counter.view(T0).current == (0 if algorithm == "tokenBucket" else 5)


@pytest.mark.parametrize("algorithm", ["fixedWindow", "slidingWindow", "tokenBucket"])
def test_cost_over_the_limit_never_passes(algorithm: Algorithm) -> None:
    counter = Counter(spec(algorithm, 5, 1000))
    outcome = counter.hit(T0, cost=6)
    assert not outcome.allowed and outcome.after_ms == -1 and outcome.remaining == 5


@pytest.mark.parametrize("algorithm", ["fixedWindow", "slidingWindow", "tokenBucket"])
def test_wait_ms_is_the_first_moment_the_hit_passes(algorithm: Algorithm) -> None:
    """Brute force: for random states, ``wait_ms`` is exactly when ``need`` first fits."""
    rng = random.Random(5)
    for _ in range(400):
        s = spec(algorithm, rng.randint(1, 30), rng.randint(1, 60), refill=rng.randint(1, 5))
        counter = Counter(s)
        now = T0 + rng.randint(0, 1000)
        for _ in range(rng.randint(0, 3)):
            counter.burst(now, rng.randint(0, s.limit))
            now += rng.randint(0, s.window_ms)
        need = rng.randint(1, s.limit)
        wait = alg.wait_ms(s, counter.view(now), need)
        assert wait >= 0
        assert alg.available(s, counter.view(now + wait)) >= need
        if wait > 0:
            assert alg.available(s, counter.view(now + wait - 1)) < need


def test_ttls() -> None:
    fixed = Counter(spec("fixedWindow", 3, 1000))
    fixed.hit(T0 + 300)
    assert fixed.expires == T0 + 1000  # the window's end
    sliding = Counter(spec("slidingWindow", 3, 1000))
    sliding.hit(T0 + 300)
    assert sliding.expires == T0 + 2000  # the end of the next window, where it is the previous one
    bucket = Counter(spec("tokenBucket", 4, 1000, refill=1))
    bucket.hit(T0 + 300, cost=3)
    assert bucket.expires == T0 + 300 + 3000  # full again after three steps


def test_clock_going_back_keeps_counting_in_the_stored_window() -> None:
    counter = Counter(spec("fixedWindow", 3, 1000))
    assert counter.burst(T0 + 2500, 3) == 3
    assert counter.burst(T0 + 1900, 3) == 0  # Redis's clock went back a window: still full


def test_reserve_batch_shrinks_towards_zero() -> None:
    s = spec("fixedWindow", 1000, MINUTE)
    counter = Counter(s)
    grants = []
    while True:
        grant, write = alg.reserve(s, counter.view(T0), need=1, max_batch=100, divisor=8)
        if write is None:
            break
        counter.stored, _ = write
        counter.expires = T0 + MINUTE
        grants.append(grant.granted)
    assert sum(grants) == 1000
    assert grants[:3] == [100, 100, 100]  # capped by max_batch while plenty is left
    assert grants == sorted(grants, reverse=True)
    assert grants[-8:] == [1] * 8  # the last tokens go one at a time
    assert grant.granted == 0 and grant.after_ms == MINUTE


def test_reserve_grants_at_least_the_need_or_nothing() -> None:
    s = spec("fixedWindow", 10, 1000)
    view = alg.observe(s, alg.Stored(T0 // 1000, 7), T0)
    grant, write = alg.reserve(s, view, need=4, max_batch=100, divisor=8)
    assert grant.granted == 0 and write is None and grant.remaining == 3
    grant, write = alg.reserve(s, view, need=2, max_batch=100, divisor=8)
    assert grant.granted == 2 and grant.remaining == 1
    assert grant.tag == T0 // 1000 and grant.tag_left_ms == 1000


def test_give_back_only_uncounts() -> None:
    s = spec("tokenBucket", 5, 1000)
    view = alg.observe(s, alg.Stored(current=1, stamp=T0), T0 + 10)
    after, stored, _ = alg.give_back(s, view, 2)
    assert after.current == 3 and stored is not None and stored.stamp == T0
    _, stored, _ = alg.give_back(s, view, 10)
    assert stored is None  # full: an absent bucket is a full one
    w = spec("slidingWindow", 5, 1000)
    view = alg.observe(w, alg.Stored(T0 // 1000, 2, 4), T0)
    after, _, _ = alg.give_back(w, view, 5)
    assert after.current == 0 and after.previous == 4
