"""Hybrid bookkeeping against an in-memory reservation backend, with one fake clock.

The over-admission bound from limiter/hybrid.py is checked here by simulation:
N instances, random interleavings, every admission checked against what exact mode allows.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from limiter import algorithms as alg
from limiter.algorithms import Grant
from limiter.hybrid import HybridSettings, HybridStore
from limiter.local import LocalStore
from limiter.model import Algorithm, LimitSpec

from tests.unit.limiter.specs import FakeClock, spec


class CountingBackend:
    """LocalStore's Redis-like reserve/release, counted, with an await in between like a socket."""

    def __init__(self, clock: FakeClock) -> None:
        self.store = LocalStore(clock_ms=clock.ms)
        self.reserves = 0
        self.releases = 0

    async def reserve(
        self, spec: LimitSpec, key: str, *, need: int, max_batch: int, divisor: int, instance: str
    ) -> Grant:
        self.reserves += 1
        await asyncio.sleep(0)
        return await self.store.reserve(spec, key, need=need, max_batch=max_batch, divisor=divisor, instance=instance)

    async def release(self, spec: LimitSpec, key: str, *, tag: int, tokens: int, instance: str) -> int:
        self.releases += 1
        return await self.store.release(spec, key, tag=tag, tokens=tokens, instance=instance)


def instances(n: int, clock: FakeClock, backend: CountingBackend, max_batch: int = 10) -> list[HybridStore]:
    settings = HybridSettings(max_batch=max_batch, spread=2.0)
    return [
        HybridStore(backend, instance_id=f"i{i}", expected_instances=n, settings=settings, clock=clock.seconds)
        for i in range(n)
    ]


async def test_serves_a_batch_from_memory_after_one_reservation() -> None:
    clock = FakeClock()
    backend = CountingBackend(clock)
    [store] = instances(1, clock, backend)
    s = spec("fixedWindow", 100, 60_000)
    decisions = [await store.hit(s, "k") for _ in range(10)]
    assert backend.reserves == 1  # min(max_batch 10, 100 ÷ 2)
    assert all(d.allowed and d.source == "hybrid" for d in decisions)
    assert [d.remaining for d in decisions] == list(range(99, 89, -1))  # one instance: exact numbers
    assert decisions[0].reset_after == 60.0
    await store.hit(s, "k")
    assert backend.reserves == 2


async def test_concurrent_hits_share_one_reservation_call() -> None:
    clock = FakeClock()
    backend = CountingBackend(clock)
    [store] = instances(1, clock, backend)
    s = spec("fixedWindow", 1000, 60_000)
    decisions = await asyncio.gather(*(store.hit(s, "k") for _ in range(50)))
    assert all(d.allowed for d in decisions)
    assert backend.reserves == 5


async def test_denial_is_remembered_until_a_hit_could_pass() -> None:
    clock = FakeClock()
    backend = CountingBackend(clock)
    [store] = instances(1, clock, backend)
    s = spec("fixedWindow", 3, 1000)
    assert [(await store.hit(s, "k")).allowed for _ in range(3)] == [True] * 3
    calls = backend.reserves
    denials = [await store.hit(s, "k") for _ in range(20)]
    assert not any(d.allowed for d in denials)
    assert backend.reserves == calls + 1  # only the first denial asked
    assert denials[-1].reset_after == pytest.approx(1.0)
    clock.advance(1000)
    assert (await store.hit(s, "k")).allowed


async def test_a_bigger_hit_is_not_denied_from_memory_by_a_smaller_denial() -> None:
    clock = FakeClock()
    backend = CountingBackend(clock)
    [store] = instances(1, clock, backend, max_batch=1)
    s = spec("fixedWindow", 5, 1000)
    assert (await store.hit(s, "k", 3)).allowed
    assert not (await store.hit(s, "k", 3)).allowed  # 2 left
    assert (await store.hit(s, "k", 2)).allowed  # asks Redis again: a smaller need may fit


async def test_tokens_lapse_with_their_window_and_never_spill() -> None:
    clock = FakeClock()
    backend = CountingBackend(clock)
    [store] = instances(1, clock, backend)
    s = spec("fixedWindow", 100, 1000)
    clock.advance(400)
    await store.hit(s, "k")
    assert store.held_tokens() == 9
    clock.advance(599)
    assert (await store.hit(s, "k")).allowed and backend.reserves == 1
    clock.advance(1)  # the window ended
    assert store.held_tokens() == 0
    await store.hit(s, "k")
    assert backend.reserves == 2 and store.lapsed_tokens == 8
    view = alg.observe(s, backend.store._load(("%s" % s.id, "k", s.algorithm, s.window_ms), clock.ms()), clock.ms())
    assert view.current == 10  # the new window holds only the new reservation


async def test_close_gives_back_unused_tokens_in_the_same_window_only() -> None:
    clock = FakeClock()
    backend = CountingBackend(clock)
    a, b = instances(2, clock, backend)
    s = spec("fixedWindow", 100, 1000)
    await a.hit(s, "k")
    await b.hit(s, "k")
    held = a.held_tokens()
    await a.close()
    assert a.released_tokens == held
    assert backend.store.hit_now(s, "k").remaining == 100 - 1 - 1 - b.held_tokens() - 1
    clock.advance(1000)
    await b.close()  # the window ended: nothing to give back, nothing lands in the new window
    assert b.released_tokens == 0 and backend.releases == 1


async def test_a_changed_limit_does_not_reuse_old_tokens() -> None:
    clock = FakeClock()
    backend = CountingBackend(clock)
    [store] = instances(1, clock, backend)
    old = spec("fixedWindow", 100, 1000, id="same")
    new = spec("fixedWindow", 5, 1000, id="same")
    await store.hit(old, "k")
    d = await store.hit(new, "k")
    assert d.limit == 5 and backend.reserves == 2
    await store.close()
    assert store.released_tokens > 0  # the retired bucket's tokens went back too


async def test_sweep_never_drops_live_tokens() -> None:
    clock = FakeClock()
    backend = CountingBackend(clock)
    store = HybridStore(backend, instance_id="x", settings=HybridSettings(max_batch=5, sweep_every=2), clock=clock.seconds)
    s = spec("fixedWindow", 100, 10_000)
    await store.hit(s, "live")
    for i in range(10):
        await store.hit(spec("fixedWindow", 1, 10_000), f"drained-{i}")
    assert store.held_tokens() == 4
    assert len(store._buckets) <= 3
    assert (await store.hit(s, "live")).allowed and backend.reserves == 11


def _exact_bound_violation(s: LimitSpec, admissions: list[int], n: int, batch: int) -> str | None:
    """Check admissions (times, ms) against what exact mode allows plus the documented bound."""
    if s.algorithm == "fixedWindow":
        per_window: dict[int, int] = {}
        for t in admissions:
            per_window[t // s.window_ms] = per_window.get(t // s.window_ms, 0) + 1
        worst = max(per_window.values(), default=0)
        return None if worst <= s.limit else f"{worst} in one window"
    if s.algorithm == "slidingWindow":
        counts: dict[int, int] = {}
        for t in admissions:
            w = t // s.window_ms
            counts[w] = counts.get(w, 0) + 1
            elapsed = t - w * s.window_ms
            estimate = counts.get(w - 1, 0) * (s.window_ms - elapsed) / s.window_ms + counts[w]
            if estimate > s.limit + 1e-9:
                return f"estimate {estimate} at {t}"
        return None
    # token bucket: from the first draw, at most capacity + refill per elapsed period;
    # over any interval, at most one more refill (or N × B) on top.
    first = admissions[0] if admissions else 0
    for i, t in enumerate(admissions):
        if i + 1 > s.limit + s.refill_tokens * ((t - first) // s.window_ms):
            return f"{i + 1} admitted by {t - first} ms from a full bucket"
    extra = min(n * batch, s.refill_tokens)
    for i, a in enumerate(admissions):
        for j in range(i, len(admissions)):
            span = admissions[j] - a
            if j - i + 1 > s.limit + s.refill_tokens * (span // s.window_ms + 1) + extra:
                return f"{j - i + 1} admitted in {span} ms"
    return None


@pytest.mark.parametrize("algorithm", ["fixedWindow", "slidingWindow", "tokenBucket"])
@pytest.mark.parametrize("seed", range(6))
async def test_n_instances_never_admit_beyond_the_documented_bound(algorithm: Algorithm, seed: int) -> None:
    rng = random.Random(seed)
    clock = FakeClock()
    backend = CountingBackend(clock)
    n, batch = 4, rng.choice([1, 5, 20])
    fleet = instances(n, clock, backend, max_batch=batch)
    s = spec(algorithm, rng.choice([10, 50, 200]), rng.choice([100, 1000]), refill=rng.choice([1, 3, 10]))
    dead: set[int] = set()
    admitted: list[int] = []
    for _ in range(3000):
        clock.advance(rng.choice([0, 0, 0, 1, 2, 5, 20]))
        i = rng.randrange(n)
        if i in dead:
            continue
        if rng.random() < 0.001:
            dead.add(i)  # killed: its reservation is never returned
            continue
        if (await fleet[i].hit(s, "k")).allowed:
            admitted.append(clock.ms())
    assert admitted
    assert _exact_bound_violation(s, admitted, n, batch) is None


async def test_killed_instance_exact_accounting_within_a_window() -> None:
    clock = FakeClock()
    backend = CountingBackend(clock)
    fleet = instances(4, clock, backend, max_batch=20)
    s = spec("fixedWindow", 400, 10_000)
    admitted = 0
    for store in fleet:
        admitted += sum([(await store.hit(s, "k")).allowed for _ in range(5)])
    killed = fleet.pop()
    held_by_killed = killed.held_tokens()
    assert held_by_killed > 0
    for _ in range(200):
        for store in fleet:
            admitted += (await store.hit(s, "k")).allowed
    live_held = sum(store.held_tokens() for store in fleet)
    assert admitted + held_by_killed + live_held == 400  # every token is admitted or held
    assert admitted <= 400
    clock.advance(10_000)  # the killed instance's tokens lapse with the window
    admitted_next = 0
    for _ in range(200):
        for store in fleet:
            admitted_next += (await store.hit(s, "k")).allowed
    assert admitted_next + sum(store.held_tokens() for store in fleet) == 400


async def test_calls_per_decision_at_a_steady_rate() -> None:
    clock = FakeClock()
    backend = CountingBackend(clock)
    fleet = instances(4, clock, backend, max_batch=100)
    s = spec("slidingWindow", 100_000, 60_000)
    decisions = 0
    for step in range(8000):  # 8000 hits over 40 s, round robin: well under the limit
        clock.advance(5)
        assert (await fleet[step % 4].hit(s, "k")).allowed
        decisions += 1
    ratio = backend.reserves / decisions
    assert ratio <= 0.05
    assert ratio == pytest.approx(0.01, abs=0.002)


async def test_tokens_of_a_removed_limit_lapse_without_bringing_its_metrics_back() -> None:
    from prometheus_client import REGISTRY

    from limiter import metrics

    clock = FakeClock()
    backend = CountingBackend(clock)
    [store] = instances(1, clock, backend)
    s = spec("fixedWindow", 100, 1000)
    assert (await store.hit(s, "k")).allowed
    assert store.held_tokens() > 0
    metrics.forget(s.id)  # the limit was removed from the config
    await store.close()  # gives its tokens back
    series = [
        sample for family in REGISTRY.collect() for sample in family.samples if sample.labels.get("limit") == s.id
    ]
    assert series == [], series
    assert store.released_tokens > 0
