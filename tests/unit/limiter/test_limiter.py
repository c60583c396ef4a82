"""The Limiter's routing, on_store_failure policies, shadow mode and metrics (Redis unreachable:
a closed loopback port refuses at once, so no server is needed)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from prometheus_client import REGISTRY
from structlog.testing import capture_logs

from limiter import BreakerSettings, Decision, Limiter
from limiter.errors import StoreTimeout
from limiter.local import LocalStore
from limiter.model import LimitSpec

from tests.harness.ports import free_port
from tests.unit.limiter.specs import FakeClock, spec


def sample(name: str, limit: LimitSpec, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, {"limit": limit.id, **labels}) or 0.0


@pytest.fixture
async def down() -> AsyncIterator[Limiter]:
    limiter = Limiter(
        url=f"redis://127.0.0.1:{free_port()}/0",
        expected_instances=4,
        breaker=BreakerSettings(consecutive_failures=3, cooldown=60),
    )
    # The fallback's fixed windows on a clock that stands still: exact counts never straddle
    # the end of a wall-clock window.
    limiter.local = LocalStore(expected_instances=4, clock_ms=FakeClock().ms)
    yield limiter
    await limiter.close()


async def test_local_policy_enforces_limit_over_instances(down: Limiter) -> None:
    s = spec("fixedWindow", 100, 60_000, on_store_failure="local")
    decisions = [await down.hit(s, "k") for _ in range(40)]
    assert {d.source for d in decisions} == {"local"}
    assert sum(d.allowed for d in decisions) == 25
    assert decisions[-1].limit == 25 and decisions[-1].reset_after > 0
    assert sample("gatehouse_ratelimit_fallback_active", s) == 1
    assert sample("gatehouse_ratelimit_fallback_decisions_total", s, policy="local") == 40
    assert sample("gatehouse_ratelimit_over_limit_total", s) == 15


async def test_open_policy_allows(down: Limiter) -> None:
    s = spec("fixedWindow", 1, 60_000, on_store_failure="open")
    decisions = [await down.hit(s, "k") for _ in range(5)]
    assert all(d.allowed and d.source == "open" and d.remaining == 1 for d in decisions)


async def test_closed_policy_denies_with_one_second(down: Limiter) -> None:
    s = spec("fixedWindow", 100, 60_000, on_store_failure="closed")
    d = await down.hit(s, "k")
    assert (d.allowed, d.source, d.remaining, d.reset_after) == (False, "closed", 0, 1.0)
    assert sample("gatehouse_ratelimit_over_limit_total", s) == 0


async def test_breaker_stops_asking_a_dead_redis(down: Limiter) -> None:
    s = spec("fixedWindow", 100, 60_000)
    for _ in range(3):
        await down.hit(s, "k")
    assert down.circuit_state == "open"
    calls = down.stats.redis_calls
    for _ in range(50):
        await down.hit(s, "k")
    assert down.stats.redis_calls == calls == 6  # 3 failed hits, each tried twice (refused)
    assert down.stats.decisions == 53
    assert sample("gatehouse_ratelimit_redis_errors_total", s, reason="connection") == 3
    assert sample("gatehouse_ratelimit_redis_errors_total", s, reason="circuit_open") == 50


async def test_hybrid_falls_back_too(down: Limiter) -> None:
    s = spec("tokenBucket", 8, 1000, mode="hybrid", on_store_failure="local")
    decisions = [await down.hit(s, "k") for _ in range(5)]
    assert [d.allowed for d in decisions] == [True, True, False, False, False]
    assert {d.source for d in decisions} == {"local"}


async def test_fallback_is_logged_once_per_transition(down: Limiter) -> None:
    s = spec("fixedWindow", 100, 60_000)
    with capture_logs() as logs:
        for _ in range(5):
            await down.hit(s, "k")
    fallbacks = [e for e in logs if e["event"] == "ratelimit_fallback"]
    assert len(fallbacks) == 1
    assert fallbacks[0]["limit"] == s.id and fallbacks[0]["policy"] == "local"


async def test_recovers_when_the_store_answers_again(down: Limiter, monkeypatch: pytest.MonkeyPatch) -> None:
    s = spec("fixedWindow", 100, 60_000)
    assert (await down.hit(s, "k")).source == "local"
    answer = Decision(True, 100, 99, 30.0, "redis")

    async def healthy(spec: LimitSpec, key: str, cost: int = 1) -> Decision:
        return answer

    monkeypatch.setattr(down.redis, "hit", healthy)
    with capture_logs() as logs:
        assert await down.hit(s, "k") is answer
    assert [e["event"] for e in logs] == ["ratelimit_fallback_ended"]
    assert sample("gatehouse_ratelimit_fallback_active", s) == 0


async def test_shadow_limit_counts_but_never_denies(down: Limiter) -> None:
    s = spec("fixedWindow", 4, 60_000, shadow=True, on_store_failure="local")  # local share: 1
    first, second = await down.hit(s, "k"), await down.hit(s, "k")
    assert first.allowed and not first.shadow_denied
    assert second.allowed and second.shadow_denied and second.remaining == 0
    assert sample("gatehouse_ratelimit_shadow_total", s) == 1
    assert sample("gatehouse_ratelimit_over_limit_total", s) == 0
    closed = spec("fixedWindow", 4, 60_000, shadow=True, on_store_failure="closed")
    assert (await down.hit(closed, "k")).shadow_denied


async def test_hits_and_near_limit_are_counted(down: Limiter) -> None:
    s = spec("fixedWindow", 40, 60_000, on_store_failure="local")  # local share: 10
    for _ in range(10):
        await down.hit(s, "k")
    assert sample("gatehouse_ratelimit_hits_total", s) == 10
    assert sample("gatehouse_ratelimit_near_limit_total", s) == 1  # remaining 0 < 10 % of 10


async def test_timeouts_are_store_failures(down: Limiter, monkeypatch: pytest.MonkeyPatch) -> None:
    async def slow(spec: LimitSpec, key: str, cost: int = 1) -> Decision:
        raise StoreTimeout("Redis did not answer in time")

    monkeypatch.setattr(down.redis, "hit", slow)
    s = spec("fixedWindow", 100, 60_000, on_store_failure="open")
    assert (await down.hit(s, "k")).source == "open"
    assert sample("gatehouse_ratelimit_redis_errors_total", s, reason="timeout") == 1


async def test_cost_must_be_positive(down: Limiter) -> None:
    with pytest.raises(ValueError):
        await down.hit(spec(), "k", 0)


def test_urls() -> None:
    with pytest.raises(ValueError, match="scheme"):
        Limiter(url="memcached://127.0.0.1:1")
    cluster = Limiter(url="redis+cluster://127.0.0.1:7000")
    assert type(cluster.redis.client).__name__ == "RedisCluster"
