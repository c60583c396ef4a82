"""The same storage tests against a real 3-node Redis Cluster on loopback.

Every test imported below is the unchanged function from test_ratelimit_store.py; only
``redis_url`` differs (``redis+cluster://``), so the contract suite (exact, hybrid, local),
the boundary burst, the token bucket, NOSCRIPT reload, the key layout, and the hybrid
tests with 4 instances all run against the cluster too. What needs killing one standalone
server (the on_store_failure test) stays in the other module.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from redis.asyncio import RedisCluster as AsyncRedisCluster
from structlog.testing import capture_logs

from limiter import Limiter, LimitSpec
from limiter.keys import counter_key
from limiter.redis_store import RedisClient
from tests.harness.redis_cluster import RedisCluster
from tests.integration.test_ratelimit_store import (  # noqa: F401  (collected here as well)
    SAFE_TIMEOUT,
    admin,
    backend,
    settle,
    test_a_stale_release_never_lands_in_the_next_window,
    test_boundary_burst,
    test_calls_per_decision_exact_and_hybrid,
    test_contract_a_cost_over_the_limit_never_passes,
    test_contract_allows_up_to_the_limit_then_denies,
    test_contract_denied_hits_do_not_count,
    test_contract_fixed_window_starts_over,
    test_contract_keys_and_limits_are_independent,
    test_contract_remaining_and_reset_after_are_consistent,
    test_contract_sliding_window_weighs_the_previous_window,
    test_contract_token_bucket_refills,
    test_four_instances_exact_mode_admit_exactly_the_limit,
    test_four_instances_hybrid_mode_admit_at_most_the_limit_plus_the_bound,
    test_graceful_close_returns_unused_tokens,
    test_keys_and_ttls_as_documented,
    test_killed_instance_reservation_lapses_with_its_window,
    test_noscript_reload_after_script_flush,
    test_token_bucket_follows_capacity_and_refill,
)

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    cluster = RedisCluster.start(log_dir=tmp_path_factory.mktemp("redis-cluster"))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def redis_url(redis_cluster: RedisCluster) -> str:
    return redis_cluster.url


async def test_admin_and_limiter_really_use_the_cluster(redis_url: str, admin: RedisClient, redis_cluster: RedisCluster) -> None:
    assert isinstance(admin, AsyncRedisCluster)
    spec = LimitSpec(id=f"cluster/{uuid.uuid4().hex[:8]}", algorithm="fixedWindow", limit=10, window_ms=60_000)
    await settle(spec.window_ms, 10_000)
    limiter = Limiter(url=redis_url, timeout=SAFE_TIMEOUT)
    try:
        assert isinstance(limiter.redis.client, AsyncRedisCluster)
        decision = await limiter.hit(spec, "alice")
    finally:
        await limiter.close()
    assert (decision.allowed, decision.source, decision.remaining) == (True, "redis", 9)
    # The counter is on exactly one node: the one that owns its hash tag's slot.
    holders = [port for port in redis_cluster.ports if redis_cluster.cli_call(port, "exists", counter_key(spec, "alice")) == "1"]
    assert len(holders) == 1, holders


async def test_counters_spread_over_the_nodes(redis_url: str, redis_cluster: RedisCluster) -> None:
    """Each (limit, key) lives on the node that owns its hash tag's slot; 60 keys use every node."""
    spec = LimitSpec(id=f"spread/{uuid.uuid4().hex[:8]}", algorithm="fixedWindow", limit=10, window_ms=60_000)
    await settle(spec.window_ms, 10_000)  # a fixed-window counter expires when its window ends
    limiter = Limiter(url=redis_url, timeout=SAFE_TIMEOUT)
    try:
        with capture_logs() as logs:
            decisions = [await limiter.hit(spec, f"user-{i}") for i in range(60)]
        assert all(d.allowed for d in decisions)
        assert [d.source for d in decisions] == ["redis"] * 60, logs[:4]
    finally:
        await limiter.close()
    per_node = [
        sum(
            redis_cluster.cli_call(port, "exists", counter_key(spec, f"user-{i}")) == "1" for i in range(60)
        )
        for port in redis_cluster.ports
    ]
    assert sum(per_node) == 60
    assert all(count > 0 for count in per_node)
