"""Sources as the runtime sees them: through the RouteSource/EndpointSource protocols."""

from __future__ import annotations

import asyncio
from pathlib import Path

from control_plane.config import ControlPlaneConfig
from control_plane.sources.base import LayeredEndpoints
from control_plane.sources.from_config import sources_from_config
from control_plane.sources.git_feedback import GitFeedback
from control_plane.sources.git import GitSource
from control_plane.sources.kubernetes.source import KubernetesSource
from control_plane.sources.static_endpoints import StaticEndpointsSource, StaticEndpointTable, parse_endpoints
from control_plane.translator import ClusterRef, Endpoint, EndpointTable
from servicekit.audit import LogAuditSink

ORDERS = ClusterRef("shop", "orders", 8080)


def test_the_config_becomes_route_and_endpoint_sources_kubernetes_being_both(tmp_path: Path) -> None:
    config = ControlPlaneConfig.model_validate(
        {
            "sources": {
                "git": [{"name": "a", "repo": "/r/a"}, {"name": "b", "repo": "/r/b", "pollInterval": "250ms"}],
                "staticEndpoints": {"file": "endpoints.yaml"},
                "kubernetes": {"leaseDuration": "20s", "leaseRenew": "5s"},
            },
            "baseDir": str(tmp_path),
        }
    )
    sources = sources_from_config(config, audit=LogAuditSink())
    [a, b, kube] = sources.routes
    [kube_endpoints, static] = sources.endpoints
    assert isinstance(a, GitSource) and isinstance(b, GitSource) and isinstance(kube, KubernetesSource)
    assert kube_endpoints is kube and isinstance(static, StaticEndpointsSource), "Kubernetes endpoints first, then the file"
    assert [s.name for s in sources.every] == ["a", "b", "static-endpoints", "kubernetes"], "each once, in /status order"
    assert sources.git == (a, b)
    assert b._settings.poll_interval == 0.25 and kube._settings.lease_duration == 20.0
    assert kube.feedback is kube, "Kubernetes writes a status back"
    assert isinstance(a.feedback, GitFeedback), "Git hears which Route objects its routes replace (for /status)"


async def test_the_static_file_is_synced_after_its_first_poll_even_when_missing(tmp_path: Path) -> None:
    published: list[tuple[EndpointTable, float]] = []
    missing = StaticEndpointsSource(tmp_path / "missing.yaml", poll_interval=0.01)
    present = tmp_path / "endpoints.yaml"
    present.write_text("services:\n  orders: [127.0.0.1:9000]\n")
    source = StaticEndpointsSource(present, poll_interval=0.01)
    tasks = [asyncio.create_task(s.run_endpoints(lambda t, at: published.append((t, at)))) for s in (missing, source)]
    try:
        await asyncio.wait_for(asyncio.gather(missing.synced.wait(), source.synced.wait()), 2)
        [(table, _)] = published
        assert table.endpoints_for(ORDERS) == (Endpoint("127.0.0.1", 9000),)
        assert missing.status()["error"] == [f"{tmp_path / 'missing.yaml'}: file not found"]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def test_a_static_table_knows_the_services_it_has_a_key_for() -> None:
    table = parse_endpoints("services:\n  orders: []\n  shop/payments:9090: [127.0.0.1:1]\n", "e.yaml")
    assert table.knows(ORDERS) and table.endpoints_for(ORDERS) == ()
    assert table.knows(ClusterRef("shop", "payments", 9090))
    assert not table.knows(ClusterRef("shop", "payments", 80)) and not table.knows(ClusterRef("x", "y", 1))


def test_layered_tables_take_the_first_that_knows_the_service() -> None:
    first = parse_endpoints("services:\n  orders: []\n", "first.yaml")
    second = parse_endpoints("services:\n  orders: [127.0.0.1:1]\n  payments: [127.0.0.1:2]\n", "second.yaml")
    third = parse_endpoints("services:\n  payments: [127.0.0.1:3]\n  quotes: [127.0.0.1:4]\n", "third.yaml")
    layered = LayeredEndpoints(first, second, third)
    assert layered.endpoints_for(ORDERS) == (), "known with no endpoints still answers"
    assert layered.endpoints_for(ClusterRef("shop", "payments", 80)) == (Endpoint("127.0.0.1", 2),)
    assert layered.endpoints_for(ClusterRef("shop", "quotes", 80)) == (Endpoint("127.0.0.1", 4),)
    assert layered.knows(ClusterRef("shop", "quotes", 80)) and not layered.knows(ClusterRef("shop", "nope", 80))
    assert LayeredEndpoints().endpoints_for(ORDERS) == () and not LayeredEndpoints().knows(ORDERS)
    assert LayeredEndpoints(StaticEndpointTable({})).endpoints_for(ORDERS) == ()
