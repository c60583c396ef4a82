"""Counters in this process's memory: the same algorithms (``algorithms.py``) without Redis.

Two uses:

- ``onStoreFailure: local``: while Redis is away each instance enforces
  ``model.local_share(spec, expected_instances)``, i.e. ``⌈limit ÷ instances⌉``, so the
  fleet stays near the global limit without talking to anyone. Decisions say
  ``source="local"`` and report the local share as their ``limit``.
- An in-memory ``ReservationBackend`` (``reserve``/``release`` with Redis's semantics), so
  hybrid bookkeeping can be tested without Redis.

Windows follow the wall clock (``clock_ms``), like Redis ``TIME``. Entries are dropped only
once they are equivalent to an absent counter (window over, bucket full), so forgetting
never admits more.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from . import algorithms as alg
from .model import Decision, LimitSpec, local_share
from .store import decision

_CounterKey = tuple[str, str, str, int]


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class LocalStore:
    def __init__(
        self,
        *,
        expected_instances: int = 1,
        clock_ms: Callable[[], int] = wall_ms,
        sweep_every: int = 4096,
    ) -> None:
        if expected_instances < 1:
            raise ValueError("expected_instances must be at least 1")
        self.expected_instances = expected_instances
        self._clock_ms = clock_ms
        self._counters: dict[_CounterKey, tuple[alg.Stored, int]] = {}  # state, expires at (ms)
        self._records: dict[_CounterKey, dict[str, tuple[int, int]]] = {}  # instance -> (tag, held)
        self._shares: dict[LimitSpec, LimitSpec] = {}
        self._sweep_every = sweep_every
        self._ops = 0

    def __len__(self) -> int:
        return len(self._counters)

    def share(self, spec: LimitSpec) -> LimitSpec:
        """The spec this store enforces for ``spec`` (its local share)."""
        if self.expected_instances == 1:
            return spec
        shared = self._shares.get(spec)
        if shared is None:
            if len(self._shares) > 10_000:
                self._shares.clear()
            shared = self._shares[spec] = local_share(spec, self.expected_instances)
        return shared

    async def hit(self, spec: LimitSpec, key: str, cost: int = 1) -> Decision:
        return self.hit_now(spec, key, cost)

    def hit_now(self, spec: LimitSpec, key: str, cost: int = 1) -> Decision:
        """``hit`` without the coroutine: the fallback path needs no await."""
        spec = self.share(spec)
        now = self._clock_ms()
        ckey = _key(spec, key)
        view = alg.observe(spec, self._load(ckey, now), now)
        outcome, write = alg.hit(spec, view, cost)
        if write is not None:
            self._save(ckey, write, now)
        return decision(spec, outcome.allowed, outcome.remaining, outcome.after_ms, "local", view.index)

    def refund(self, spec: LimitSpec, key: str, *, tag: int, cost: int) -> int:
        """Un-count an admitted hit of window/epoch ``tag``; 0 once it has ended."""
        spec = self.share(spec)
        now = self._clock_ms()
        ckey = _key(spec, key)
        stored = self._load(ckey, now)
        view = alg.observe(spec, stored, now)
        if stored is None or view.index != tag:
            return 0
        self._write_back(ckey, spec, view, cost, now)
        return cost

    async def reserve(
        self, spec: LimitSpec, key: str, *, need: int, max_batch: int, divisor: int, instance: str
    ) -> alg.Grant:
        spec = self.share(spec)
        now = self._clock_ms()
        ckey = _key(spec, key)
        view = alg.observe(spec, self._load(ckey, now), now)
        grant, write = alg.reserve(spec, view, need, max_batch, divisor)
        if write is not None:
            self._save(ckey, write, now)
            records = self._records.setdefault(ckey, {})
            tag, held = records.get(instance, (grant.tag, 0))
            for other, (other_tag, _) in list(records.items()):
                if other_tag < grant.tag:
                    del records[other]
            records[instance] = (grant.tag, (held if tag == grant.tag else 0) + grant.granted)
        return grant

    async def release(self, spec: LimitSpec, key: str, *, tag: int, tokens: int, instance: str) -> int:
        spec = self.share(spec)
        now = self._clock_ms()
        ckey = _key(spec, key)
        view = alg.observe(spec, self._load(ckey, now), now)
        records = self._records.get(ckey, {})
        held_tag, held = records.get(instance, (tag, 0))
        if view.index != tag or held_tag != tag:
            return 0
        n = min(tokens, held)
        if n <= 0:
            return 0
        self._write_back(ckey, spec, view, n, now)
        if held == n:
            del records[instance]
        else:
            records[instance] = (tag, held - n)
        return n

    async def close(self) -> None:
        self._counters.clear()
        self._records.clear()

    def _write_back(self, ckey: _CounterKey, spec: LimitSpec, view: alg.View, n: int, now: int) -> None:
        _, stored, ttl = alg.give_back(spec, view, n)
        if stored is None:
            self._counters.pop(ckey, None)
        else:
            self._save(ckey, (stored, ttl), now)

    def _load(self, ckey: _CounterKey, now: int) -> alg.Stored | None:
        entry = self._counters.get(ckey)
        if entry is None:
            return None
        if entry[1] <= now:
            del self._counters[ckey]
            return None
        return entry[0]

    def _save(self, ckey: _CounterKey, write: tuple[alg.Stored, int], now: int) -> None:
        stored, ttl = write
        self._counters[ckey] = (stored, now + ttl)
        self._ops += 1
        if self._ops % self._sweep_every == 0:
            self._sweep(now)

    def _sweep(self, now: int) -> None:
        for ckey in [k for k, (_, expires) in self._counters.items() if expires <= now]:
            del self._counters[ckey]
            self._records.pop(ckey, None)


def _key(spec: LimitSpec, key: str) -> _CounterKey:
    return (spec.id, key, spec.algorithm, spec.window_ms)
