"""The rate-limit engine both the RateLimitService and the HTTP authorization check use.

A library layer between the kernel (servicekit) and the services: it imports only
servicekit and itself, and ``ratelimit_svc`` and ``ext_authz`` both build on it, so a
route's limits are the same code whichever call decides them.

    model.py        LimitSpec, Decision (pure values)      algorithms.py  the maths (pure)
    engine.py       Limiter: routing, on_store_failure,    metrics.py     Prometheus
                    shadow
    verdict.py      all of a request's limits at once      policies.py    RoutePolicy over xDS
    redis_store.py  exact mode, reservation backend        lua/           the scripts
    hybrid.py       batched reservations, local tokens     local.py       in-memory counters
    config.py       the redis/hybrid config blocks
    circuit_breaker.py, errors.py, keys.py, scripts.py, store.py (interfaces)
"""

from .circuit_breaker import BreakerSettings
from .engine import Limiter, LimiterStats
from .errors import StoreError
from .hybrid import HybridSettings
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
