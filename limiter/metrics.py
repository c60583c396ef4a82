"""ratelimit_svc's Prometheus metrics, declared once, with label children pre-bound per limit.

Per limit id (label ``limit``):

    gatehouse_ratelimit_hits_total                 every hit checked (including shadow and fallback)
    gatehouse_ratelimit_over_limit_total           hits denied because the limit was reached
    gatehouse_ratelimit_near_limit_total           allowed hits that left remaining < 10% of the limit
    gatehouse_ratelimit_shadow_total               hits a shadow limit would have denied (allowed)
    gatehouse_ratelimit_redis_errors_total{reason} store failures: timeout, connection, circuit_open, fault
    gatehouse_ratelimit_fallback_active            1 while the limit's decisions come from on_store_failure
    gatehouse_ratelimit_fallback_decisions_total{policy}  decisions made by local, open or closed
    gatehouse_ratelimit_reservations_total         hybrid reservations granted
    gatehouse_ratelimit_reserved_tokens_total      tokens those reservations took
    gatehouse_ratelimit_released_tokens_total      unused tokens given back (graceful close)
    gatehouse_ratelimit_lapsed_tokens_total        reserved tokens unused when their window ended
    gatehouse_ratelimit_redis_calls_total{op}      Redis round trips: hit, refund, reserve, release

Per circuit breaker (label ``breaker``): ``gatehouse_ratelimit_circuit_state{state}`` (1 for
the current state) and ``gatehouse_ratelimit_circuit_transitions_total{from,to}``.

Label lookups cost a lock and a dict per call, so ``for_limit`` binds each limit's
children once; the hot path only increments.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Gauge

from .scripts import OPS

HITS = Counter("gatehouse_ratelimit_hits_total", "Rate-limit hits checked", ["limit"])
OVER_LIMIT = Counter("gatehouse_ratelimit_over_limit_total", "Hits denied because the limit was reached", ["limit"])
NEAR_LIMIT = Counter(
    "gatehouse_ratelimit_near_limit_total", "Allowed hits that left less than 10% of the limit", ["limit"]
)
SHADOW = Counter("gatehouse_ratelimit_shadow_total", "Hits a shadow-mode limit would have denied", ["limit"])
REDIS_ERRORS = Counter(
    "gatehouse_ratelimit_redis_errors_total", "Hits the store could not answer", ["limit", "reason"]
)
FALLBACK_ACTIVE = Gauge(
    "gatehouse_ratelimit_fallback_active", "1 while the limit is decided by its on_store_failure policy", ["limit"]
)
FALLBACK_DECISIONS = Counter(
    "gatehouse_ratelimit_fallback_decisions_total", "Decisions made by the on_store_failure policy", ["limit", "policy"]
)
RESERVATIONS = Counter("gatehouse_ratelimit_reservations_total", "Hybrid reservations granted", ["limit"])
RESERVED_TOKENS = Counter("gatehouse_ratelimit_reserved_tokens_total", "Tokens taken by hybrid reservations", ["limit"])
RELEASED_TOKENS = Counter(
    "gatehouse_ratelimit_released_tokens_total", "Unused reserved tokens given back to Redis", ["limit"]
)
LAPSED_TOKENS = Counter(
    "gatehouse_ratelimit_lapsed_tokens_total", "Reserved tokens still unused when their window ended", ["limit"]
)
REDIS_CALLS = Counter("gatehouse_ratelimit_redis_calls_total", "Redis round trips", ["limit", "op"])

CIRCUIT_STATES: Final = ("closed", "open", "half_open")
CIRCUIT_STATE = Gauge("gatehouse_ratelimit_circuit_state", "1 for the breaker's current state", ["breaker", "state"])
CIRCUIT_TRANSITIONS = Counter(
    "gatehouse_ratelimit_circuit_transitions_total", "Circuit breaker state changes", ["breaker", "from", "to"]
)


class LimitMetrics:
    """One limit's children, bound once. ``fallback`` mirrors the gauge (to log transitions)."""

    __slots__ = (
        "limit_id", "hits", "over_limit", "near_limit", "shadow", "fallback_gauge", "fallback",
        "reservations", "reserved_tokens", "released_tokens", "lapsed_tokens",
        "calls", "_errors", "_fallbacks",
    )

    def __init__(self, limit_id: str) -> None:
        self.limit_id = limit_id
        self.hits = HITS.labels(limit_id)
        self.over_limit = OVER_LIMIT.labels(limit_id)
        self.near_limit = NEAR_LIMIT.labels(limit_id)
        self.shadow = SHADOW.labels(limit_id)
        self.fallback_gauge = FALLBACK_ACTIVE.labels(limit_id)
        self.fallback_gauge.set(0)
        self.fallback = False
        self.reservations = RESERVATIONS.labels(limit_id)
        self.reserved_tokens = RESERVED_TOKENS.labels(limit_id)
        self.released_tokens = RELEASED_TOKENS.labels(limit_id)
        self.lapsed_tokens = LAPSED_TOKENS.labels(limit_id)
        self.calls = {op: REDIS_CALLS.labels(limit_id, op) for op in OPS}
        self._errors: dict[str, Counter] = {}
        self._fallbacks: dict[str, Counter] = {}

    def redis_error(self, reason: str) -> None:
        child = self._errors.get(reason)
        if child is None:
            child = self._errors[reason] = REDIS_ERRORS.labels(self.limit_id, reason)
        child.inc()

    def fallback_decision(self, policy: str) -> None:
        child = self._fallbacks.get(policy)
        if child is None:
            child = self._fallbacks[policy] = FALLBACK_DECISIONS.labels(self.limit_id, policy)
        child.inc()


_BOUND: dict[str, LimitMetrics] = {}


def for_limit(limit_id: str) -> LimitMetrics:
    """The limit's metric children (created on first use)."""
    bound = _BOUND.get(limit_id)
    if bound is None:
        bound = _BOUND[limit_id] = LimitMetrics(limit_id)
    return bound


def existing(limit_id: str) -> LimitMetrics | None:
    """The limit's metric children if it still has them: bookkeeping that trails a removed
    limit (tokens lapsing or given back later) must not bring its series back."""
    return _BOUND.get(limit_id)


def forget(limit_id: str) -> None:
    """Drop a removed limit's series, so configuration churn does not grow /metrics forever."""
    bound = _BOUND.pop(limit_id, None)
    if bound is None:
        return
    for family in (HITS, OVER_LIMIT, NEAR_LIMIT, SHADOW, FALLBACK_ACTIVE, RESERVATIONS, RESERVED_TOKENS,
                   RELEASED_TOKENS, LAPSED_TOKENS):
        _remove(family, (limit_id,))
    for op in OPS:
        _remove(REDIS_CALLS, (limit_id, op))
    for reason in bound._errors:
        _remove(REDIS_ERRORS, (limit_id, reason))
    for policy in bound._fallbacks:
        _remove(FALLBACK_DECISIONS, (limit_id, policy))


def _remove(family: Counter | Gauge, labels: tuple[str, ...]) -> None:
    try:
        family.remove(*labels)
    except KeyError:
        pass


def circuit_state(breaker: str, state: str) -> None:
    for each in CIRCUIT_STATES:
        CIRCUIT_STATE.labels(breaker, each).set(1 if each == state else 0)


def circuit_transition(breaker: str, old: str, new: str) -> None:
    CIRCUIT_TRANSITIONS.labels(breaker, old, new).inc()
    circuit_state(breaker, new)
