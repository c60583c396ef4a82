"""Hybrid mode: reserve tokens from the global counter in batches, spend them locally.

An instance with no local tokens for (limit, key) runs ``reserve`` once (concurrent hits on
the same key wait for that one call) and gets ``min(free, max(need, min(max_batch,
free // (spread × expected_instances))))`` tokens: the batch shrinks as the global
remainder approaches zero, down to exactly what the hit needs. Hits are then answered
from memory until the tokens run out. A denial is remembered until the time Redis said a
hit could pass, so an over-limit key costs no Redis calls either.

Reservations are taken *before* anything is admitted, from the same counter exact mode
uses, and are tagged with their window (fixed/sliding) or refill epoch (token bucket):

- local tokens lapse at the end of that window/epoch, measured from when the reserve call
  was *sent* plus the time Redis said was left, so never later than Redis's own end;
- ``release`` (graceful ``close()``) gives unused tokens back only within the same
  window/epoch and only up to what Redis's record says this instance holds, so a stale
  release never lands in the next window (Limitador PR #288);
- a crashed instance's tokens stay counted and lapse with their window: nothing evicts or
  reclaims a live reservation.

Worst-case over-admission versus exact mode, N instances, batch at most B (derivation in
docs/ratelimit.md, "Algorithms, storage and the hybrid bound"):

- fixedWindow:   0. Per window, admitted ≤ counted ≤ limit.
- slidingWindow: 0. Each reservation passed the estimate when taken, and the estimate
  only falls later in the same window, so every admission satisfies it.
- tokenBucket:   0 over any interval that starts at a refill-epoch boundary or with a full
  bucket; ≤ min(N × B, refill_tokens) over an arbitrary interval (tokens taken earlier in
  the epoch may be spent in it).

The price is under-admission: up to N × B tokens can sit unused in instances (and lapse
with the window if an instance dies). ``reserve`` calls per decision are counted by the
backend (``RedisStore.calls``).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from . import metrics
from .model import Decision, LimitSpec
from .store import ReservationBackend

log = structlog.get_logger(component="ratelimit")


@dataclass(frozen=True, slots=True)
class HybridSettings:
    """``max_batch``: most tokens one reservation takes; ``spread`` (k): an instance takes at
    most ``remaining ÷ (k × expected_instances)``, so others still find tokens."""

    max_batch: int = 100
    spread: float = 2.0
    release_timeout: float = 1.0
    sweep_every: int = 4096

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        if self.spread <= 0:
            raise ValueError("spread must be positive")


class _Bucket:
    """One (limit, key)'s local tokens and what the last reservation said."""

    __slots__ = ("spec", "key", "tokens", "tag", "deadline", "remote_remaining", "reset_at",
                 "deny_until", "deny_need", "lock")

    def __init__(self, spec: LimitSpec, key: str) -> None:
        self.spec = spec
        self.key = key
        self.tokens = 0
        self.tag = -1
        self.deadline = 0.0
        self.remote_remaining = 0
        self.reset_at = 0.0
        self.deny_until = 0.0
        self.deny_need = 0
        self.lock = asyncio.Lock()


class HybridStore:
    def __init__(
        self,
        backend: ReservationBackend,
        *,
        instance_id: str,
        expected_instances: int = 1,
        settings: HybridSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings or HybridSettings()
        self.instance_id = instance_id
        self.divisor = max(1, math.ceil(self.settings.spread * expected_instances))
        self._backend = backend
        self._clock = clock
        self._buckets: dict[tuple[str, str], _Bucket] = {}
        self._retired: list[_Bucket] = []
        self._ops = 0
        self.reservations = 0
        self.reserved_tokens = 0
        self.released_tokens = 0
        self.lapsed_tokens = 0

    def held_tokens(self) -> int:
        """Unexpired local tokens (what this instance could still admit without Redis)."""
        now = self._clock()
        return sum(b.tokens for b in (*self._buckets.values(), *self._retired) if b.deadline > now)

    async def hit(self, spec: LimitSpec, key: str, cost: int = 1) -> Decision:
        now = self._clock()
        bucket = self._buckets.get((spec.id, key))
        if bucket is None or bucket.spec != spec:
            bucket = self._new_bucket(spec, key, bucket)
        else:
            answer = self._answer_locally(bucket, cost, now)
            if answer is not None:
                return answer
        async with bucket.lock:  # one reserve call per key at a time; the others re-check after it
            answer = self._answer_locally(bucket, cost, self._clock())
            if answer is not None:
                return answer
            return await self._reserve(bucket, cost)

    def _new_bucket(self, spec: LimitSpec, key: str, old: _Bucket | None) -> _Bucket:
        if old is not None and old.tokens:
            self._retired.append(old)  # the limit changed: its tokens lapse (or go back on close)
        bucket = self._buckets[(spec.id, key)] = _Bucket(spec, key)
        self._ops += 1
        if self._ops % self.settings.sweep_every == 0:
            self._sweep()
        return bucket

    def _answer_locally(self, b: _Bucket, cost: int, now: float) -> Decision | None:
        if b.tokens and now >= b.deadline:
            self._lapse(b)
        if b.tokens >= cost:
            b.tokens -= cost
            return Decision(
                True, b.spec.limit, b.remote_remaining + b.tokens, max(0.0, b.reset_at - now), "hybrid", tag=b.tag
            )
        if now < b.deny_until and cost - b.tokens >= b.deny_need:
            return Decision(False, b.spec.limit, b.remote_remaining + b.tokens, b.deny_until - now, "hybrid")
        return None

    async def _reserve(self, b: _Bucket, cost: int) -> Decision:
        spec, need = b.spec, cost - b.tokens
        sent = self._clock()
        grant = await self._backend.reserve(
            spec, b.key, need=need, max_batch=self.settings.max_batch, divisor=self.divisor, instance=self.instance_id
        )
        now = self._clock()
        if grant.granted == 0:
            wait = spec.window_ms if grant.after_ms < 0 else grant.after_ms
            b.deny_until, b.deny_need, b.remote_remaining = sent + wait / 1000, need, grant.remaining
            return Decision(False, spec.limit, grant.remaining + b.tokens, wait / 1000, "hybrid")
        bound = metrics.for_limit(spec.id)
        bound.reservations.inc()
        bound.reserved_tokens.inc(grant.granted)
        self.reservations += 1
        self.reserved_tokens += grant.granted
        if b.tokens and b.tag != grant.tag:
            self._lapse(b)  # only if this host's clock ran slow against Redis's: drop the old tokens
        b.tokens += grant.granted
        b.tag = grant.tag
        b.deadline = sent + grant.tag_left_ms / 1000
        b.remote_remaining = grant.remaining
        b.reset_at = sent + grant.after_ms / 1000
        b.deny_until = 0.0
        if b.tokens < cost:
            return Decision(False, spec.limit, grant.remaining + b.tokens, 0.001, "hybrid")
        b.tokens -= cost
        return Decision(True, spec.limit, grant.remaining + b.tokens, max(0.0, b.reset_at - now), "hybrid", tag=b.tag)

    def refund(self, spec: LimitSpec, key: str, *, tag: int, cost: int) -> int:
        """Put an admitted hit's tokens back in the local bucket (no Redis call): only while
        the reservation they came from is live, else they lapse with it."""
        b = self._buckets.get((spec.id, key))
        if b is None or b.spec != spec or b.tag != tag or b.deadline <= self._clock():
            return 0
        b.tokens += cost
        return cost

    def _lapse(self, b: _Bucket) -> None:
        self.lapsed_tokens += b.tokens
        if (bound := metrics.existing(b.spec.id)) is not None:
            bound.lapsed_tokens.inc(b.tokens)
        b.tokens = 0

    def _sweep(self) -> None:
        """Forget buckets that hold nothing live; never one with unexpired tokens."""
        now = self._clock()
        idle = [
            k for k, b in self._buckets.items()
            if (b.tokens == 0 or b.deadline <= now) and b.deny_until <= now and not b.lock.locked()
        ]
        for k in idle:
            b = self._buckets.pop(k)
            if b.tokens:
                self._lapse(b)
        self._retired = [b for b in self._retired if b.tokens and b.deadline > now]

    async def close(self) -> None:
        """Give unused tokens back (best effort, bounded by ``release_timeout``); the rest lapse."""
        now = self._clock()
        live = [b for b in (*self._buckets.values(), *self._retired) if b.tokens and b.deadline > now]
        self._buckets.clear()
        self._retired.clear()
        if not live:
            return
        gate = asyncio.Semaphore(32)
        results = await asyncio.gather(*(self._release(b, gate) for b in live), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            log.warning("ratelimit_release_failed", buckets=len(failed), error=str(failed[0])[:300])

    async def _release(self, b: _Bucket, gate: asyncio.Semaphore) -> None:
        tokens, b.tokens = b.tokens, 0
        async with gate, asyncio.timeout(self.settings.release_timeout):
            given = await self._backend.release(b.spec, b.key, tag=b.tag, tokens=tokens, instance=self.instance_id)
        self.released_tokens += given
        if (bound := metrics.existing(b.spec.id)) is not None:
            bound.released_tokens.inc(given)
