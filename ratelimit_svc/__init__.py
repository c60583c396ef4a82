"""Gatehouse's global rate limiting: algorithms, Redis Lua buckets, hybrid reservations, fallback.

The service (``service.py``) calls one ``Limiter``; everything below it is storage:

    model.py        LimitSpec, Decision (pure values)      algorithms.py  the maths (pure)
    limiter.py      routing + on_store_failure + shadow    metrics.py     Prometheus
    redis_store.py  exact mode, reservation backend        lua/           the scripts
    hybrid.py       batched reservations, local tokens     local.py       in-memory counters
    circuit_breaker.py, errors.py, keys.py, scripts.py, store.py (interfaces)
"""

from .circuit_breaker import BreakerSettings
from .errors import StoreError
from .hybrid import HybridSettings
from .limiter import Limiter, LimiterStats
from .model import Algorithm, Decision, LimitSpec, LimitSpecError, Mode, Source, StoreFailure, local_share

__all__ = [
    "Algorithm",
    "BreakerSettings",
    "Decision",
    "HybridSettings",
    "LimitSpec",
    "LimitSpecError",
    "Limiter",
    "LimiterStats",
    "Mode",
    "Source",
    "StoreError",
    "StoreFailure",
    "local_share",
]
