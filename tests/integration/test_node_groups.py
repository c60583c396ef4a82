"""A snapshot per node group: Envoys of another `node.cluster` get their own listener,
the same routes, and show up separately in `gatehouse status`."""

from __future__ import annotations

import subprocess
import sys

from tests.harness.http_client import get, wait_for
from tests.harness.ports import free_port
from tests.harness.route_repo import route_doc
from tests.integration.conftest import StackFactory


def test_node_groups_get_their_own_listener_and_status(make_stack: StackFactory) -> None:
    internal_port = free_port()
    stack = make_stack(
        control_plane_extra={"nodeGroups": {"internal": {"listenerAddress": "127.0.0.1", "listenerPort": internal_port}}}
    )
    stack.commit_routes({"a.yaml": [route_doc("a", {"auth": {"required": False}, "match": {"path": "/a"}, "backends": [{"service": "svc-a", "port": 8080}]})]})
    stack.start(wait_path="/a")
    internal = stack.start_envoy("internal-0", cluster="internal")
    internal.wait_live()
    wait_for(lambda: get(internal_port, "/a").upstream == "svc-a", 10, "the internal Envoy serving /a")
    assert internal.stats(filter="listener_manager.total_listeners_active")["listener_manager.total_listeners_active"] == 1

    # A route change reaches both groups.
    stack.commit_routes({"a.yaml": [route_doc("a", {"auth": {"required": False}, "match": {"path": "/a"}, "backends": [{"service": "svc-b", "port": 8080}]})]})
    stack.control_plane.sync()
    stack.wait_upstream("/a", "svc-b")
    wait_for(lambda: get(internal_port, "/a").upstream == "svc-b", 5, "the internal Envoy following the change")

    status = stack.control_plane.status()
    groups = sorted((p["node"], p["cluster"]) for p in status["proxies"])
    assert groups == [("gateway-0", "gateway"), ("internal-0", "internal")]
    wait_for(lambda: all(not p["nacked"] and len(p["acked"]) == 4 for p in stack.control_plane.status()["proxies"]), 5, "both ACKed")
    shown = subprocess.run(
        [sys.executable, "-m", "gatehouse", "status", "--admin", stack.control_plane.admin_url],
        capture_output=True, text=True, timeout=30,
    )
    rows = {line.split()[0]: line for line in shown.stdout.splitlines() if line.startswith(("internal-0", "gateway-0"))}
    assert set(rows) == {"internal-0", "gateway-0"}, shown.stdout
    assert all(row.endswith("in sync") for row in rows.values()), shown.stdout
    assert shown.returncode == 0
