"""The one object the service calls: ``await limiter.hit(spec, key, cost)`` → ``Decision``.

Routing, per limit:

- ``mode: exact``  → ``RedisStore.hit``: one Lua script per hit (``source="redis"``);
- ``mode: hybrid`` → ``HybridStore``: local tokens from batched reservations (``"hybrid"``).

When the store cannot answer (timeout, connection error, circuit breaker open), the
limit's ``on_store_failure`` decides, without raising and without waiting any longer:

- ``local``  (default): an in-memory limiter at ``⌈limit ÷ expected_instances⌉``
  (``source="local"``; ``Decision.limit`` is that local share);
- ``open``:   allow (``source="open"``; ``remaining = limit``, ``reset_after = 0``: nothing
  is counted, the service may omit the X-RateLimit-* headers);
- ``closed``: deny (``source="closed"``, ``remaining = 0``, ``reset_after = 1`` s).

Hybrid tokens already reserved keep being spent during an outage: they were counted. The
circuit breaker's half-open probe (the first hit after its cooldown) brings every limit
back to the global counters by itself when Redis answers again.

Shadow limits (``spec.shadow``) are counted like any other, but a hit they would deny is
returned as ``allowed=True, shadow_denied=True`` and counted in the shadow metric, not in
over_limit. A denied hit is never counted, shadow or not.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace

import structlog

from . import metrics
from .circuit_breaker import BreakerSettings, CircuitBreaker, State
from .errors import StoreError
from .hybrid import HybridSettings, HybridStore
from .keys import DEFAULT_PREFIX
from .local import LocalStore
from .model import Decision, LimitSpec
from .redis_store import RedisStore

log = structlog.get_logger(component="ratelimit")

_CLOSED_RETRY_AFTER = 1.0


@dataclass(frozen=True, slots=True)
class LimiterStats:
    """Counted since the Limiter started: hits decided and Redis round trips made for them."""

    decisions: int
    redis_calls: int

    @property
    def calls_per_decision(self) -> float:
        return self.redis_calls / self.decisions if self.decisions else 0.0


class Limiter:
    """Rate-limit decisions for one process. Create it once; ``await close()`` on shutdown."""

    def __init__(
        self,
        *,
        url: str,
        expected_instances: int = 1,
        timeout: float = 0.1,
        connect_timeout: float | None = None,
        hybrid: HybridSettings | None = None,
        breaker: BreakerSettings | None = None,
        key_prefix: str = DEFAULT_PREFIX,
        instance_id: str | None = None,
        max_connections: int = 64,
    ) -> None:
        if expected_instances < 1:
            raise ValueError("expected_instances must be at least 1")
        self.instance_id = instance_id or uuid.uuid4().hex[:16]
        self.expected_instances = expected_instances
        self.breaker = CircuitBreaker(breaker, name="redis")
        self.redis = RedisStore(
            url=url,
            timeout=timeout,
            connect_timeout=connect_timeout,
            key_prefix=key_prefix,
            breaker=self.breaker,
            max_connections=max_connections,
        )
        self.hybrid = HybridStore(
            self.redis, instance_id=self.instance_id, expected_instances=expected_instances, settings=hybrid
        )
        self.local = LocalStore(expected_instances=expected_instances)
        self._decisions = 0

    @property
    def stats(self) -> LimiterStats:
        return LimiterStats(self._decisions, self.redis.calls)

    @property
    def circuit_state(self) -> State:
        return self.breaker.state

    async def hit(self, spec: LimitSpec, key: str, cost: int = 1) -> Decision:
        """Decide one hit of ``cost`` (≥ 1; Envoy's ``hits_addend`` 0 means 1) for ``key``."""
        if cost < 1:
            raise ValueError("cost must be at least 1")
        self._decisions += 1
        bound = metrics.for_limit(spec.id)
        try:
            if spec.mode == "hybrid":
                answer = await self.hybrid.hit(spec, key, cost)
            else:
                answer = await self.redis.hit(spec, key, cost)
        except StoreError as exc:
            bound.redis_error(exc.reason)
            answer = self._fallback(spec, key, cost, bound, exc)
        else:
            if bound.fallback:
                bound.fallback = False
                bound.fallback_gauge.set(0)
                log.info("ratelimit_fallback_ended", limit=spec.id)
        return self._account(spec, answer, bound)

    async def refund(self, spec: LimitSpec, key: str, decision: Decision, cost: int = 1) -> None:
        """Un-count a hit ``hit`` admitted, because another limit denied the request.

        Without it, a request one limit denies still uses up the others (a user over their
        own limit would drain the quota of everyone behind the same IP). Best effort: if
        the window has ended or Redis fails, the hit stays counted, which is stricter.
        """
        if not decision.allowed or decision.shadow_denied or decision.tag < 0:
            return
        if decision.source == "hybrid":
            self.hybrid.refund(spec, key, tag=decision.tag, cost=cost)
        elif decision.source == "local":
            self.local.refund(spec, key, tag=decision.tag, cost=cost)
        elif decision.source == "redis":
            try:
                await self.redis.refund(spec, key, tag=decision.tag, cost=cost)
            except StoreError as exc:
                metrics.for_limit(spec.id).redis_error(exc.reason)
                log.info("ratelimit_refund_failed", limit=spec.id, reason=exc.reason)

    def _fallback(self, spec: LimitSpec, key: str, cost: int, bound: metrics.LimitMetrics, exc: StoreError) -> Decision:
        policy = spec.on_store_failure
        if not bound.fallback:
            bound.fallback = True
            bound.fallback_gauge.set(1)
            log.warning("ratelimit_fallback", limit=spec.id, policy=policy, reason=exc.reason, error=exc.message)
        bound.fallback_decision(policy)
        if policy == "local":
            return self.local.hit_now(spec, key, cost)
        if policy == "open":
            return Decision(True, spec.limit, spec.limit, 0.0, "open")
        return Decision(False, spec.limit, 0, _CLOSED_RETRY_AFTER, "closed")

    def _account(self, spec: LimitSpec, answer: Decision, bound: metrics.LimitMetrics) -> Decision:
        bound.hits.inc()
        if answer.allowed:
            if answer.remaining * 10 < answer.limit:
                bound.near_limit.inc()
            return answer
        if spec.shadow:
            bound.shadow.inc()
            return replace(answer, allowed=True, shadow_denied=True)
        if answer.source != "closed":
            bound.over_limit.inc()
        return answer

    async def close(self) -> None:
        """Return unused hybrid tokens, then close the Redis connections."""
        try:
            await self.hybrid.close()
        finally:
            await self.redis.close()
            await self.local.close()
