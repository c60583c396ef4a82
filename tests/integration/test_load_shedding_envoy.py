"""Shedding by route priority through the real control plane and Envoy: low-priority routes
are refused first, over a service's connection limit and when their latency climbs,
while a critical route to the same slow service keeps being served."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.harness.gateway import GatewayStack
from tests.harness.http_client import Client, Reply
from tests.harness.route_repo import route_doc
from tests.integration.conftest import StackFactory
from tests.integration.test_gateway_errors_envoy import gateway_error

pytestmark = pytest.mark.envoy

SERVICE = [{"service": "svc-a", "port": 8080}]


def concurrently(stack: GatewayStack, paths: list[str]) -> list[tuple[float, Reply]]:
    """Send every path at once, each on its own connection: (seconds, reply) in path order."""
    results: list[tuple[float, Reply] | None] = [None] * len(paths)

    def call(i: int, path: str) -> None:
        client = Client(stack.listener_port, timeout=20)
        try:
            start = time.monotonic()
            reply = client.request(path)
            results[i] = (time.monotonic() - start, reply)
        finally:
            client.close()

    threads = [threading.Thread(target=call, args=(i, p)) for i, p in enumerate(paths)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert all(r is not None for r in results), "a request never finished"
    return [r for r in results if r is not None]


def start_stack(make_stack: StackFactory, routes: list[dict[str, Any]], **gateway: Any) -> GatewayStack:
    stack = make_stack(upstreams=("svc-a",))
    stack.configure_gateway(**gateway)
    stack.commit_routes({"r.yaml": routes})
    stack.start(wait_path="/critical")
    return stack


def test_over_the_connection_limit_low_priority_is_shed_and_critical_is_served(make_stack: StackFactory) -> None:
    bulkhead = {"maxConnections": 2, "maxPendingRequests": 1, "maxRequests": 2}
    stack = start_stack(
        make_stack,
        [
            route_doc("batch", {"auth": {"required": False}, "match": {"pathPrefix": "/batch"}, "backends": SERVICE, "priority": "low", "circuitBreaker": bulkhead}),
            route_doc("critical", {"auth": {"required": False}, "match": {"pathPrefix": "/critical"}, "backends": SERVICE, "priority": "critical"}),
        ],
    )
    # 8 slow low-priority requests fill the service's DEFAULT pool; then 2 critical ones arrive.
    paths = ["/batch?delay=1.5"] * 8
    results: list[tuple[float, Reply]] = []
    flood = threading.Thread(target=lambda: results.extend(concurrently(stack, paths)))
    flood.start()
    time.sleep(0.4)
    critical = concurrently(stack, ["/critical?delay=0.2"] * 2)
    flood.join(30)

    assert [r.status for _, r in critical] == [200, 200], [(r.status, r.body) for _, r in critical]
    assert all(t < 1.0 for t, _ in critical), "critical requests did not wait for the low-priority flood"
    shed = [r for _, r in results if r.status == 503]
    assert len(results) == 8 and len(shed) >= 4, [r.status for _, r in results]
    for reply in shed:
        gateway_error(reply, 503, "upstream_overflow")
    assert sum(r.status == 200 for _, r in results) >= 1


def test_when_latency_climbs_low_priority_routes_are_shed_first(make_stack: StackFactory) -> None:
    stack = start_stack(
        make_stack,
        [
            route_doc("report", {"auth": {"required": False}, "match": {"pathPrefix": "/report"}, "backends": SERVICE, "priority": "low"}),
            route_doc("normal", {"auth": {"required": False}, "match": {"pathPrefix": "/normal"}, "backends": SERVICE}),
            route_doc("critical", {"auth": {"required": False}, "match": {"pathPrefix": "/critical"}, "backends": SERVICE, "priority": "critical"}),
        ],
        loadShedding={"latencyTarget": "50ms", "maxConcurrency": 100},
    )
    # Slow low-priority responses (400 ms against a 50 ms target) drive their limit down.
    deadline = time.monotonic() + 20
    shed: list[Reply] = []
    while not shed and time.monotonic() < deadline:
        shed = [r for _, r in concurrently(stack, ["/report?delay=0.4"] * 12) if r.status == 503]
    assert shed, "the low-priority limit never shrank"
    gateway_error(shed[0], 503, "overloaded")

    # Now the same load on each priority, at once: only the low-priority route is refused.
    paths = ["/report?delay=0.4"] * 12 + ["/normal?delay=0.4"] * 12 + ["/critical?delay=0.4"] * 12
    results = concurrently(stack, paths)
    statuses = {name: [r.status for _, r in results[i * 12:(i + 1) * 12]] for i, name in enumerate(("low", "normal", "critical"))}
    assert statuses["critical"] == [200] * 12, statuses
    assert statuses["normal"] == [200] * 12, statuses
    assert statuses["low"].count(503) >= 6, statuses
    fast_refusals = [t for t, r in results[:12] if r.status == 503]
    assert max(fast_refusals) < 0.3, "a shed request is refused at once, not after waiting"
    limit = stack.envoy.stats(filter="adaptive_concurrency.*concurrency_limit$")
    assert limit and max(limit.values()) < 12, limit
