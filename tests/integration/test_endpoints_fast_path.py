"""Endpoint changes take the fast path: only EDS is rebuilt and pushed, even with 10,000 routes."""

from __future__ import annotations

import time

from tests.harness.http_client import wait_for
from tests.harness.route_repo import route_doc
from tests.harness.upstream import EchoUpstream
from tests.integration.conftest import StackFactory

ROUTES = 10_000
PER_FILE = 500


def test_new_endpoint_is_served_fast_with_10k_routes_and_no_route_push(make_stack: StackFactory) -> None:
    stack = make_stack(upstreams=("svc-a",))
    services = [f"svc-{i % 50}" for i in range(ROUTES)]
    for start in range(0, ROUTES, PER_FILE):
        docs = [
            route_doc(
                f"r{i}",
                {"auth": {"required": False}, "match": {"path": f"/r/{i}/{{id}}" if i % 2 else f"/r/{i}"}, "backends": [{"service": services[i], "port": 8080}]},
            )
            for i in range(start, start + PER_FILE)
        ]
        stack.repo.write(f"routes-{start // PER_FILE:03d}.yaml", docs)
    stack.repo.write("hot.yaml", [route_doc("hot", {"auth": {"required": False}, "match": {"path": "/hot"}, "backends": [{"service": "svc-a", "port": 8080}]})])
    stack.repo.commit("10k routes")
    stack.start(wait_path="/hot")
    plane = stack.control_plane
    assert plane.status()["snapshot"]["routes"] == ROUTES + 1

    def counters() -> dict[str, float]:
        return {
            "translations": plane.metric("gatehouse_translations_total"),
            "routes_translated": plane.metric("gatehouse_routes_translated_total"),
            "CDS": plane.metric("gatehouse_xds_pushes_total", type="CDS"),
            "RDS": plane.metric("gatehouse_xds_pushes_total", type="RDS"),
            "LDS": plane.metric("gatehouse_xds_pushes_total", type="LDS"),
            "EDS": plane.metric("gatehouse_xds_pushes_total", type="EDS"),
        }

    def settled() -> dict[str, float]:
        """The counters once two reads 0.3 s apart agree: the start-up's pushes are over."""
        last, deadline = counters(), time.monotonic() + 10
        while time.monotonic() < deadline:
            time.sleep(0.3)
            now = counters()
            if now == last:
                return now
            last = now
        raise AssertionError(f"the start-up's pushes never settled: {last}")

    before = settled()
    newcomer = EchoUpstream.start("svc-a-new", log_dir=stack.directory / "logs")
    try:
        stack.set_endpoints({"svc-a": [stack.upstreams["svc-a"].address, newcomer.address]})
        changed = time.monotonic()
        client = stack.client()
        wait_for(lambda: client.request("/hot").upstream == "svc-a-new", 5, "the new endpoint serving /hot", interval=0.002)
        latency = time.monotonic() - changed
        client.close()
        time.sleep(0.3)
        after = counters()
    finally:
        newcomer.stop()

    assert latency < 0.5, f"new endpoint took {latency:.3f}s to serve with {ROUTES} routes loaded"
    assert after["EDS"] == before["EDS"] + 1, (before, after)
    for untouched in ("translations", "routes_translated", "CDS", "RDS", "LDS"):
        assert after[untouched] == before[untouched], f"{untouched} moved on an endpoint change: {before} → {after}"
    print(f"\nendpoint change served in {latency * 1000:.1f} ms with {ROUTES} routes loaded")


def test_generated_routes_carry_their_provenance_into_envoy(make_stack: StackFactory) -> None:
    stack = make_stack(git_namespaces=["shop"])
    commit = stack.commit_routes({"team/orders.yaml": [route_doc("orders", {"auth": {"required": False}, "match": {"path": "/o"}, "backends": [{"service": "svc-a", "port": 8080}]}, namespace="shop")]})
    stack.start(wait_path="/o")
    assert stack.envoy is not None
    dump = stack.envoy.config_dump("dynamic_route_configs")
    routes = [
        r
        for config in dump["configs"]
        for vhost in config["route_config"]["virtual_hosts"]
        for r in vhost.get("routes", [])
    ]
    assert [r["name"] for r in routes] == ["shop/orders"]
    provenance = routes[0]["metadata"]["filter_metadata"]["gatehouse"]
    assert provenance == {"route": "shop/orders", "origin": f"git:routes/team/orders.yaml:1@{commit[:12]}"}
