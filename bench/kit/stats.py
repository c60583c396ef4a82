"""The statistics the benchmarks report: nearest-rank percentiles, medians, spreads, ratios.

Each takes what a benchmark has (lists with holes where a run measured nothing) and says
what it does with the holes, so the reports do not each round and filter their own way.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import Any


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): always one of the measured values."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summary_ms(values_s: list[float]) -> dict[str, Any]:
    """Seconds in; n, p50, p90, p99, max, min and mean out, in milliseconds (0.01 ms)."""
    if not values_s:
        return {"n": 0}
    ms = [v * 1000 for v in values_s]
    return {
        "n": len(ms),
        "p50_ms": round(percentile(ms, 50), 2),
        "p90_ms": round(percentile(ms, 90), 2),
        "p99_ms": round(percentile(ms, 99), 2),
        "max_ms": round(max(ms), 2),
        "min_ms": round(min(ms), 2),
        "mean_ms": round(statistics.fmean(ms), 2),
    }


def ratio(a: float | None, b: float | None, digits: int = 3) -> float | None:
    """a / b, rounded; None when either is unknown or b is 0."""
    if a is None or not b:
        return None
    return round(a / b, digits)


def difference(a: float | None, b: float | None, digits: int = 3) -> float | None:
    """a − b, rounded; None when either is unknown."""
    return round(a - b, digits) if a is not None and b is not None else None


def median(values: Iterable[float | None], digits: int | None = None) -> float | None:
    """The median of the known values (None: not measured), rounded if ``digits``; None if none is known."""
    known = [v for v in values if v is not None]
    if not known:
        return None
    middle = statistics.median(known)
    return round(middle, digits) if digits is not None else middle


def median_of_all(values: list[float | None]) -> float | None:
    """The upper median, only if every value is known: one round that measured nothing
    makes the result unknown rather than the median of the others."""
    known = [v for v in values if v is not None]
    return statistics.median_high(known) if known and len(known) == len(values) else None


def median_at(records: Iterable[dict[str, Any]], *keys: str, digits: int = 3) -> float | None:
    """The median of ``record[k1][k2]…`` over the records that have it."""
    values = []
    for record in records:
        value: Any = record
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None:
            values.append(float(value))
    return median(values, digits)


def spread_pct(values: Iterable[float | None]) -> float | None:
    """(max − min) / median of the known values, in percent; None below two values."""
    known = [v for v in values if v is not None]
    if len(known) < 2:
        return None
    middle = statistics.median(known)
    return round(100 * (max(known) - min(known)) / middle, 1) if middle else None
