"""What a rate limit is and what a decision says: plain values, no I/O, no storage imports.

The service builds a ``LimitSpec`` per configured limit and gets a ``Decision`` back for
every hit; storage backends (Redis, hybrid, local) only ever see these two types.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Final, Literal

from .errors import LimitSpecError as LimitSpecError  # its home is errors.py; importable from here as before

Algorithm = Literal["slidingWindow", "tokenBucket", "fixedWindow"]
Mode = Literal["exact", "hybrid"]
StoreFailure = Literal["local", "open", "closed"]
Source = Literal["redis", "hybrid", "local", "open", "closed"]

ALGORITHMS: Final[tuple[Algorithm, ...]] = ("slidingWindow", "tokenBucket", "fixedWindow")

MAX_LIMIT_TIMES_WINDOW: Final = 10**15
"""``limit × window_ms`` (token bucket: ``capacity × refill period``) may not exceed this.

The Lua scripts compute in doubles; keeping every product below 3 × 10^15 < 2^53 keeps
the sliding-window arithmetic exact, so Redis and the local maths agree to the request.
(10 million per day is 8.64 × 10^14: comfortably inside.)
"""


@dataclass(frozen=True, slots=True)
class LimitSpec:
    """One limit, independent of where its counters live.

    ``limit`` is requests per ``window_ms`` (fixed and sliding window) or the bucket's
    capacity (token bucket, which adds ``refill_tokens`` every ``window_ms``).
    ``mode`` picks exact (one Redis script per hit) or hybrid (batched reservations);
    ``on_store_failure`` says what to do while Redis cannot answer.
    """

    id: str
    algorithm: Algorithm
    limit: int
    window_ms: int
    refill_tokens: int = 0
    shadow: bool = False
    mode: Mode = "exact"
    on_store_failure: StoreFailure = "local"

    def __post_init__(self) -> None:
        def bad(field: str, reason: str) -> LimitSpecError:
            return LimitSpecError(self.id, field, reason)

        if not self.id:
            raise bad("id", "must not be empty")
        if self.algorithm not in ALGORITHMS:
            raise bad("algorithm", f"must be one of {', '.join(ALGORITHMS)}, not {self.algorithm!r}")
        for name in ("limit", "window_ms", "refill_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise bad(name, "must be an integer")
        if self.limit < 1:
            raise bad("limit", "must be at least 1")
        if self.window_ms < 1:
            raise bad("window_ms", "must be at least 1 ms")
        if self.limit * self.window_ms > MAX_LIMIT_TIMES_WINDOW:
            raise bad("limit", f"limit × window_ms must be ≤ {MAX_LIMIT_TIMES_WINDOW:.0e} (exact integer maths)")
        if self.algorithm == "tokenBucket":
            if self.refill_tokens < 1:
                raise bad("refill_tokens", "a token bucket must refill at least 1 token per period")
        elif self.refill_tokens != 0:
            raise bad("refill_tokens", f"only a token bucket refills; must be 0 for {self.algorithm}")
        if self.mode not in ("exact", "hybrid"):
            raise bad("mode", f"must be exact or hybrid, not {self.mode!r}")
        if self.on_store_failure not in ("local", "open", "closed"):
            raise bad("on_store_failure", f"must be local, open or closed, not {self.on_store_failure!r}")


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer for one hit.

    ``remaining`` is how many more unit hits would pass now. ``reset_after`` (seconds):
    when denied, the earliest time a hit of the same cost could pass if nobody else hits
    (use it for ``Retry-After``); when allowed, when the quota is restored: the end of
    the current window (fixed and sliding window) or when the bucket is full again.

    ``shadow_denied``: the limit is in shadow mode and would have denied this hit; it is
    reported ``allowed`` and must be treated as allowed (counted in the shadow metric only).

    ``tag``: the window or refill epoch the hit was counted in (``-1``: not counted), so
    ``Limiter.refund`` can un-count it in that window only.
    """

    allowed: bool
    limit: int
    remaining: int
    reset_after: float
    source: Source
    shadow_denied: bool = False
    tag: int = -1


def local_share(spec: LimitSpec, instances: int) -> LimitSpec:
    """The spec one of ``instances`` enforces alone while Redis is away: ``limit ÷ instances``.

    Rounded up and at least 1, so the fleet admits at most ``instances × ⌈limit ÷ instances⌉``.
    A token bucket keeps ``refill_tokens`` but refills ``instances`` times more slowly,
    which divides its rate exactly instead of rounding it.
    """
    if instances < 1:
        raise ValueError("instances must be at least 1")
    if instances == 1:
        return spec
    limit = max(1, math.ceil(spec.limit / instances))
    if spec.algorithm != "tokenBucket":
        return replace(spec, limit=limit)
    refill = min(spec.refill_tokens, limit)
    # Same rate per instance: refill tokens per (period × instances × refill / original refill).
    window = max(1, math.ceil(spec.window_ms * instances * refill / spec.refill_tokens))
    window = min(window, MAX_LIMIT_TIMES_WINDOW // limit)
    return replace(spec, limit=limit, refill_tokens=refill, window_ms=window)
