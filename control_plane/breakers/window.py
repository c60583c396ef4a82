"""A route's sliding window of calls, from the tallies telemetry sends.

Telemetry counts calls in buckets of ``BUCKET_MS`` by the request's start time (Envoy's
clock). A time window (``window``) holds the buckets that started within it: its edge is
one bucket coarse. A count window (``windowCalls: N``) holds the newest buckets until they
add up to N calls; the oldest of them is scaled down to the calls it needs, assuming its
failures are spread evenly, so the rates are over N calls (granularity: one bucket).
Several telemetry instances' tallies for the same bucket add up.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

BUCKET_MS = 100
MAX_BUCKETS = 6000
"""A bound on memory per route: a 600 s window has 6000 buckets; a count window at a
trickle of traffic merges its oldest buckets beyond this."""


@dataclass(slots=True)
class Counts:
    calls: float = 0
    failures: float = 0
    slow: float = 0

    def add(self, calls: float, failures: float, slow: float) -> None:
        self.calls += calls
        self.failures += failures
        self.slow += slow

    def rate(self, part: float) -> float:
        """Percent of calls."""
        return 100.0 * part / self.calls if self.calls else 0.0


class SlidingWindow:
    def __init__(self, *, window_ms: int | None = None, window_calls: int | None = None) -> None:
        if (window_ms is None) == (window_calls is None):
            raise ValueError("set exactly one of window_ms or window_calls")
        self.window_ms = window_ms
        self.window_calls = window_calls
        self._starts: list[int] = []  # sorted bucket starts
        self._buckets: dict[int, Counts] = {}

    def __len__(self) -> int:
        return len(self._starts)

    def add(self, bucket_ms: int, calls: int, failures: int, slow: int) -> None:
        counts = self._buckets.get(bucket_ms)
        if counts is None:
            counts = self._buckets[bucket_ms] = Counts()
            if not self._starts or bucket_ms > self._starts[-1]:
                self._starts.append(bucket_ms)  # the usual case: the newest bucket
            else:
                bisect.insort(self._starts, bucket_ms)
        counts.add(calls, failures, slow)
        if len(self._starts) > MAX_BUCKETS:
            self._merge_oldest()

    def stats(self, now_ms: float) -> Counts:
        """The calls in the window now (and old buckets pruned)."""
        if self.window_ms is not None:
            return self._time_stats(now_ms - self.window_ms)
        assert self.window_calls is not None
        return self._count_stats(self.window_calls)

    def _time_stats(self, oldest_ms: float) -> Counts:
        cut = bisect.bisect_left(self._starts, oldest_ms)
        for start in self._starts[:cut]:
            del self._buckets[start]
        del self._starts[:cut]
        total = Counts()
        for counts in self._buckets.values():
            total.add(counts.calls, counts.failures, counts.slow)
        return total

    def _count_stats(self, wanted: int) -> Counts:
        total = Counts()
        for index in range(len(self._starts) - 1, -1, -1):
            counts = self._buckets[self._starts[index]]
            missing = wanted - total.calls
            if counts.calls >= missing:
                share = missing / counts.calls if counts.calls else 0.0
                total.add(missing, counts.failures * share, counts.slow * share)
                for start in self._starts[:index]:
                    del self._buckets[start]
                del self._starts[:index]
                break
            total.add(counts.calls, counts.failures, counts.slow)
        return total

    def _merge_oldest(self) -> None:
        oldest, second = self._starts[0], self._starts[1]
        merged = self._buckets.pop(oldest)
        self._buckets[second].add(merged.calls, merged.failures, merged.slow)
        del self._starts[0]
