"""Counters in Redis or Redis Cluster: exact hits, and the reservation backend for hybrid mode.

Every operation is one EVALSHA of a script from ``lua/`` (redis-py's ``register_script``:
on ``NOSCRIPT``, after a restart, failover or ``SCRIPT FLUSH``, it loads the script, on
every primary of a cluster, and retries once; both the asyncio ``Redis`` and
``RedisCluster`` clients do this). Calls are bounded twice: the socket timeout per read
and an overall deadline per operation, which includes waiting for one of the
``max_connections`` connections (redis-py's asyncio pools fail instead of waiting). redis-py's own retries are off: a timed-out script
may have run, and running it again would count the hit twice.

Every call passes the circuit breaker first. While it is open, ``CircuitOpen`` is raised
without touching the network. ``calls`` counts round trips actually attempted.

URLs: ``redis://[user:pass@]host:port/db`` and ``rediss://`` (TLS) for one Redis;
``redis+cluster://host:port`` and ``rediss+cluster://`` for a Redis Cluster (any one node
to start from; the client discovers the rest).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Final

import structlog
from redis.asyncio import Redis, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import (
    BusyLoadingError,
    ClusterDownError,
    ConnectionError as RedisConnectionError,
    RedisClusterException,
    RedisError,
    ResponseError,
    TimeoutError as RedisTimeoutError,
    TryAgainError,
)

from . import metrics
from .algorithms import Grant
from .circuit_breaker import BreakerSettings, CircuitBreaker
from .errors import CircuitOpen, StoreError, StoreFault, StoreTimeout, StoreUnreachable
from .keys import DEFAULT_PREFIX, counter_key, reservation_key
from .model import Decision, LimitSpec
from .scripts import Op, all_sources
from .store import decision

log = structlog.get_logger(component="ratelimit")

CLUSTER_SCHEMES: Final = {"redis+cluster": "redis", "rediss+cluster": "rediss"}

RedisClient = Redis | RedisCluster


def connect(url: str, *, timeout: float, connect_timeout: float, max_connections: int) -> RedisClient:
    """A client for ``url`` with short timeouts and no retries (see the module docstring)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"not a Redis URL: {url!r}")
    options: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": connect_timeout,
        "retry": Retry(NoBackoff(), 0),
        "decode_responses": False,
        "max_connections": max_connections,
    }
    if scheme.lower() in CLUSTER_SCHEMES:
        return RedisCluster.from_url(f"{CLUSTER_SCHEMES[scheme.lower()]}://{rest}", **options)
    if scheme.lower() not in ("redis", "rediss", "unix"):
        raise ValueError(f"unsupported Redis URL scheme {scheme!r}: use redis://, rediss:// or redis+cluster://")
    return Redis.from_url(url, **options)


def convert(exc: BaseException) -> StoreError:
    """The one place where client errors become StoreErrors."""
    text = f"{type(exc).__name__}: {exc}"[:300] if str(exc) else type(exc).__name__
    if isinstance(exc, (TimeoutError, RedisTimeoutError)):
        return StoreTimeout(f"Redis did not answer in time ({text})")
    if isinstance(exc, (RedisConnectionError, OSError, ClusterDownError, TryAgainError, BusyLoadingError)):
        return StoreUnreachable(f"Redis unreachable ({text})")
    if isinstance(exc, ResponseError):
        return StoreFault(f"Redis error ({text})")
    if isinstance(exc, (RedisError, RedisClusterException)):
        return StoreUnreachable(f"Redis client error ({text})")
    return StoreFault(f"unexpected error ({text})")


class RedisStore:
    """Exact mode (``hit``) and the hybrid reservation backend (``reserve``/``release``)."""

    def __init__(
        self,
        *,
        url: str,
        timeout: float = 0.1,
        connect_timeout: float | None = None,
        key_prefix: str = DEFAULT_PREFIX,
        breaker: CircuitBreaker | None = None,
        breaker_settings: BreakerSettings | None = None,
        max_connections: int = 64,
    ) -> None:
        connect_timeout = timeout if connect_timeout is None else connect_timeout
        self.url = url
        self.key_prefix = key_prefix
        self.breaker = breaker or CircuitBreaker(breaker_settings)
        self.calls = 0
        # A NOSCRIPT reload is three round trips; a fresh connection adds a connect.
        self._deadline = connect_timeout + 3 * timeout
        self._client = connect(url, timeout=timeout, connect_timeout=connect_timeout, max_connections=max_connections)
        # redis-py's asyncio pools raise "Too many connections" instead of waiting; a burst
        # of concurrent hits waits here instead (within the same deadline).
        self._slots = asyncio.Semaphore(max_connections)
        self._ready = not isinstance(self._client, RedisCluster)
        self._init_lock = asyncio.Lock()
        self._scripts: dict[tuple[str, Op], AsyncScript] = {
            key: self._client.register_script(text) for key, text in all_sources().items()
        }

    @property
    def client(self) -> RedisClient:
        return self._client

    async def hit(self, spec: LimitSpec, key: str, cost: int = 1) -> Decision:
        reply = await self._run(spec, "hit", (counter_key(spec, key, self.key_prefix),), (cost,))
        return decision(spec, reply[0] == 1, reply[1], reply[2], "redis", int(reply[4]))

    async def refund(self, spec: LimitSpec, key: str, *, tag: int, cost: int) -> int:
        reply = await self._run(spec, "refund", (counter_key(spec, key, self.key_prefix),), (tag, cost))
        return int(reply)

    async def reserve(
        self, spec: LimitSpec, key: str, *, need: int, max_batch: int, divisor: int, instance: str
    ) -> Grant:
        keys = (counter_key(spec, key, self.key_prefix), reservation_key(spec, key, self.key_prefix))
        reply = await self._run(spec, "reserve", keys, (need, max_batch, divisor, instance))
        return Grant(reply[0], reply[1], reply[2], reply[3], reply[4])

    async def release(self, spec: LimitSpec, key: str, *, tag: int, tokens: int, instance: str) -> int:
        keys = (counter_key(spec, key, self.key_prefix), reservation_key(spec, key, self.key_prefix))
        reply = await self._run(spec, "release", keys, (tag, tokens, instance))
        return int(reply) if isinstance(reply, int) else int(reply[0])

    async def _run(self, spec: LimitSpec, op: Op, keys: Sequence[str], extra: Sequence[int | str]) -> Any:
        if not self.breaker.acquire():
            raise CircuitOpen("circuit breaker open: Redis not asked")
        bound = metrics.for_limit(spec.id)
        counter = bound.calls[op]
        script = self._scripts[(spec.algorithm, op)]
        args = (spec.limit, spec.window_ms, spec.refill_tokens, *extra)
        try:
            async with asyncio.timeout(self._deadline), self._slots:
                if not self._ready:
                    await self._initialize()
                self.calls += 1
                counter.inc()
                try:
                    reply = await script(keys=keys, args=args)
                except RedisConnectionError:
                    # Refused, reset or closed (a pooled connection a node restart killed):
                    # one more try on a fresh connection. Had the first one run, the hit is
                    # counted twice: stricter, never over-admitting.
                    self.calls += 1
                    counter.inc()
                    reply = await script(keys=keys, args=args)
        except asyncio.CancelledError:
            self.breaker.abandon()
            raise
        except Exception as exc:
            self.breaker.failure()
            error = convert(exc)
            if isinstance(error, StoreFault):
                log.error("ratelimit_redis_fault", limit=spec.id, op=op, error=error.message)
            raise error from exc
        self.breaker.success()
        return reply

    async def call(self, script: AsyncScript, keys: Sequence[str], args: Sequence[int | str]) -> Any:
        """One script that is not a rate-limit op (the waiting room's), under the same
        breaker, connection slots and deadline; never retried (it may have run)."""
        if not self.breaker.acquire():
            raise CircuitOpen("circuit breaker open: Redis not asked")
        try:
            async with asyncio.timeout(self._deadline), self._slots:
                if not self._ready:
                    await self._initialize()
                self.calls += 1
                reply = await script(keys=keys, args=args)
        except asyncio.CancelledError:
            self.breaker.abandon()
            raise
        except Exception as exc:
            self.breaker.failure()
            raise convert(exc) from exc
        self.breaker.success()
        return reply

    async def _initialize(self) -> None:
        """Discover a cluster's topology once, before any command: redis-py 8.1's async
        RedisCluster, first used by many concurrent commands, tears connections from under
        some of them ("Connection closed by server") and keeps doing so afterwards."""
        async with self._init_lock:
            if not self._ready and isinstance(self._client, RedisCluster):
                await self._client.initialize()
            self._ready = True

    async def ping(self) -> bool:
        """True if Redis answers now (readiness checks); never raises."""
        try:
            async with asyncio.timeout(self._deadline):
                return bool(await self._client.ping())
        except Exception:  # noqa: BLE001 - a failed ping of any kind is 'not healthy'
            return False

    async def close(self) -> None:
        try:
            async with asyncio.timeout(self._deadline):
                await self._client.aclose()
        except Exception:  # noqa: BLE001, S110 - closing on shutdown: nothing left to do on failure
            pass
