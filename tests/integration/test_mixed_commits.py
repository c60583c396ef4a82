"""A commit that changes a cluster Envoy has reaches Envoy within a second (issue 28).

Envoy builds a changed cluster anew and keeps it warming until an EDS response carries
its endpoints, even unchanged ones; while a cluster warms it withholds its CDS ACK, and
the control plane holds back a route to a new cluster until that ACK. A server that did
not send the unchanged endpoints again left the rebuilt cluster to Envoy's 15 s
``initial_fetch_timeout``: the cluster's change, and with a new cluster in the same
commit every new route of the commit, arrived 15 s late.

Each test commits, calls the webhook (POST /sync) and times from the commit until Envoy
serves all of the commit; the clock runs on, up to 20 s, so a failure says how late.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.harness.gateway import GatewayStack
from tests.harness.route_repo import route_doc
from tests.integration.conftest import StackFactory

SERVED_WITHIN_S = 1.0
PATIENCE_S = 20.0
"""Longer than Envoy's 15 s fetch timeout, so the unfixed server's delay is measured."""


def route(name: str, path: str, service: str, namespace: str = "shop", **spec: Any) -> dict[str, Any]:
    body = {"match": {"pathPrefix": path}, "backends": [{"service": service, "port": 8080}], "auth": {"required": False}}
    return route_doc(name, {**body, **spec}, namespace=namespace)


def start(make_stack: StackFactory, protocol: str) -> GatewayStack:
    stack = make_stack(delta=protocol == "delta", poll_interval="600s", git_namespaces=["default", "shop", "evil"])
    stack.commit_routes({"orders.yaml": [route("orders", "/orders", "svc-a")]})
    stack.start(wait_path="/orders")
    return stack


def commit_and_time(stack: GatewayStack, files: dict[str, Any], checks: dict[str, Callable[[], bool]]) -> float:
    """Seconds from the commit until every check holds at once."""
    stack.commit_routes(files, "mixed change")
    committed = time.monotonic()
    result = stack.control_plane.sync()["sources"]["routes"]
    assert result["accepted"] and result["changed"], result
    failing: list[str] = list(checks)
    while time.monotonic() - committed < PATIENCE_S:
        failing = [what for what, check in checks.items() if not check()]
        if not failing:
            return time.monotonic() - committed
        time.sleep(0.02)
    raise AssertionError(f"not served within {PATIENCE_S}s: {failing}")


def answers(stack: GatewayStack, path: str, upstream: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            reply = stack.get(path)
        except OSError:
            return False
        return reply.status == 200 and reply.upstream == upstream

    return check


def cached_for(stack: GatewayStack, path: str, seconds: int) -> Callable[[], bool]:
    """The route's answer carries the freshness its cluster's upstream filter adds: the
    rebuilt cluster serves (the route alone would answer without it)."""

    def check() -> bool:
        try:
            reply = stack.get(path)
        except OSError:
            return False
        return reply.status == 200 and reply.headers.get("cache-control") == f"max-age={seconds}"

    return check


def breaker_applied(stack: GatewayStack, cluster: str, max_connections: int) -> Callable[[], bool]:
    def check() -> bool:
        assert stack.envoy is not None
        return f"{cluster}::default_priority::max_connections::{max_connections}" in stack.envoy.admin_get("/clusters")

    return check


def assert_nothing_timed_out(stack: GatewayStack) -> None:
    assert stack.envoy is not None
    stats = stack.envoy.stats(r"warming_clusters|init_fetch_timeout")
    assert stats.get("cluster_manager.warming_clusters") == 0, stats
    assert {k: v for k, v in stats.items() if k.endswith("init_fetch_timeout") and v} == {}


def test_a_cache_route_and_a_route_in_a_new_namespace_in_one_commit(make_stack: StackFactory, protocol: str) -> None:
    """The issue's commit: the cache route changes svc-a's cluster, the new namespace adds
    a cluster (evil/svc-a), and plain routes ride along."""
    stack = start(make_stack, protocol)
    latency = commit_and_time(
        stack,
        {
            "cached.yaml": [route("cached", "/cached", "svc-a", cache={"ttl": "60s"})],
            "evil.yaml": [route("evil", "/evil", "svc-a", namespace="evil")],
            "plain.yaml": [route("plain", "/plain", "svc-b"), route("canary", "/canary", "svc-a")],
        },
        {
            "/evil from svc-a": answers(stack, "/evil", "svc-a"),
            "/plain from svc-b": answers(stack, "/plain", "svc-b"),
            "/canary from svc-a": answers(stack, "/canary", "svc-a"),
            "/cached with max-age=60": cached_for(stack, "/cached", 60),
        },
    )
    assert latency < SERVED_WITHIN_S, f"served {latency:.2f}s after the commit"
    assert_nothing_timed_out(stack)


def test_a_circuit_breaker_on_a_service_and_a_route_to_a_new_service(make_stack: StackFactory, protocol: str) -> None:
    """Any cluster setting (circuitBreaker, outlierDetection, healthCheck, timeouts.connect,
    backPressure, cache) rebuilds the cluster; a new service in the same commit waits on it."""
    stack = start(make_stack, protocol)
    latency = commit_and_time(
        stack,
        {
            "orders.yaml": [route("orders", "/orders", "svc-a", circuitBreaker={"maxConnections": 17})],
            "payments.yaml": [route("payments", "/payments", "svc-b")],
        },
        {
            "/payments from svc-b": answers(stack, "/payments", "svc-b"),
            "svc-a's breaker": breaker_applied(stack, "shop/svc-a:8080", 17),
        },
    )
    assert latency < SERVED_WITHIN_S, f"served {latency:.2f}s after the commit"
    assert_nothing_timed_out(stack)


def test_a_cache_route_alone_takes_effect_within_a_second(make_stack: StackFactory, protocol: str) -> None:
    """Without a new cluster the route itself is served at once, through the old cluster;
    the rebuilt cluster (the one that gives answers the route's ttl) used to wait 15 s."""
    stack = start(make_stack, protocol)
    latency = commit_and_time(
        stack,
        {"cached.yaml": [route("cached", "/cached", "svc-a", cache={"ttl": "60s"})]},
        {"/cached with max-age=60": cached_for(stack, "/cached", 60)},
    )
    assert latency < SERVED_WITHIN_S, f"served {latency:.2f}s after the commit"
    assert_nothing_timed_out(stack)
