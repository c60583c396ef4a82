"""`gatehouse status` against two real Envoys on one control plane, one of which refuses
a route config that the other takes (its runtime allows smaller regexes): the table shows
it NACKed with Envoy's message, `--node X --diff` shows exactly what it lacks, and the
control plane's metric counts how long the push has waited."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from control_plane.translator.names import ROUTE_CONFIG_NAME
from tests.harness.gateway import GatewayStack
from tests.harness.http_client import get, wait_for
from tests.harness.route_repo import route_doc
from tests.integration.conftest import StackFactory

BACKEND = [{"service": "svc-a", "port": 8080}]
HUGE_REGEX = "/(orders|invoices)/[0-9]{4}"


def gatehouse_status(stack: GatewayStack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gatehouse", "status", "--admin", stack.control_plane.admin_url, *args],
        capture_output=True, text=True, timeout=30,
    )


def test_status_shows_the_envoy_that_nacked_and_diffs_it_against_the_latest(make_stack: StackFactory) -> None:
    stack = make_stack(upstreams=("svc-a",))
    stack.commit_routes({"r.yaml": [route_doc("a", {"auth": {"required": False}, "match": {"pathPrefix": "/a"}, "backends": BACKEND})]})
    stack.start(wait_path="/a")
    # Same node group, stricter runtime: Envoy's regex program size limit of 5 (default 100).
    strict = stack.start_envoy("strict-0", runtime={"re2.max_program_size.error_level": 5})
    strict.wait_live()
    wait_for(lambda: len(stack.control_plane.status()["proxies"]) == 2, 10, "two Envoys connected")
    wait_for(lambda: gatehouse_status(stack).returncode == 0, 10, "both in sync")

    stack.commit_routes(
        {
            "r.yaml": [
                route_doc("a", {"auth": {"required": False}, "match": {"pathPrefix": "/a"}, "backends": BACKEND}),
                route_doc("huge", {"auth": {"required": False}, "match": {"pathRegex": HUGE_REGEX}, "backends": BACKEND}),
            ]
        },
        "a regex the strict Envoy refuses",
    )
    stack.control_plane.sync()
    stack.wait_status("/orders/1234", 200)  # gateway-0 took it

    def strict_nacked() -> bool:
        proxies = {p["node"]: p for p in stack.control_plane.status()["proxies"]}
        return "RDS" in proxies["strict-0"]["nacked"]

    wait_for(strict_nacked, 10, "strict-0's RDS NACK")
    table = gatehouse_status(stack)
    assert table.returncode == 1, table.stdout + table.stderr
    rows = {line.split()[0]: line for line in table.stdout.splitlines() if line.startswith(("gateway-0", "strict-0"))}
    assert "NACKED" in rows["strict-0"] and rows["gateway-0"].rstrip().endswith("in sync"), table.stdout
    assert "RDS NACK:" in table.stdout and "program size" in table.stdout, table.stdout
    assert "caused by default/huge" in table.stdout, table.stdout

    diff = gatehouse_status(stack, "--node", "strict-0", "--diff")
    assert diff.returncode == 1, diff.stdout + diff.stderr
    assert f"RDS ~ {ROUTE_CONFIG_NAME}" in diff.stdout, diff.stdout
    added = [line for line in diff.stdout.splitlines() if line.startswith("    +") and not line.startswith("    +++")]
    assert any("default/huge" in line for line in added), diff.stdout
    assert any("(orders|invoices)" in line for line in added), diff.stdout
    assert not any("default/huge" in line for line in diff.stdout.splitlines() if line.startswith("    -")), diff.stdout
    assert "NACK:" in diff.stdout and "program size" in diff.stdout

    same = gatehouse_status(stack, "--node", "gateway-0", "--diff")
    assert same.returncode == 0 and "no difference" in same.stdout, same.stdout + same.stderr

    # Without --diff: versions only (cheap), still flagged.
    brief = gatehouse_status(stack, "--node", "strict-0")
    assert brief.returncode == 1 and "RDS" in brief.stdout and "BEHIND" in brief.stdout, brief.stdout
    assert "virtual host" not in brief.stdout

    raw: dict[str, Any] = json.loads(gatehouse_status(stack, "--node", "strict-0", "--json", "--diff").stdout)
    assert set(raw["diff"]) == {"RDS"} and raw["diff"]["RDS"]["added"] == [] and raw["diff"]["RDS"]["removed"] == []
    unknown = gatehouse_status(stack, "--node", "nobody")
    assert unknown.returncode == 2 and "no connected proxy with node id 'nobody'" in unknown.stderr
    assert "strict-0" in unknown.stderr and "gateway-0" in unknown.stderr

    # The push strict-0 refused keeps waiting: the control plane's gauge shows its age.
    wait_for(lambda: stack.control_plane.metric("gatehouse_xds_oldest_unacked_push_seconds", type="RDS") >= 1.0, 5, "an aging unACKed RDS push")
    assert stack.control_plane.metric("gatehouse_xds_oldest_unacked_push_seconds", type="CDS") == 0
    # The strict Envoy keeps the last config it accepted: live, with the old route table.
    assert get(strict.admin_port, "/ready").status == 200
    dumped = json.dumps(strict.config_dump("dynamic_route_configs"))
    assert "default/a" in dumped and "default/huge" not in dumped


def test_status_text_lists_the_routes_left_out_and_why(make_stack: StackFactory) -> None:
    """Issue 25: the text output showed quarantined routes nowhere (only --json had them)."""
    stack = make_stack(upstreams=("svc-a",))
    room = {"admitPerSecond": 5, "maxWaiting": 10}
    stack.commit_routes({"r.yaml": [
        route_doc("a", {"auth": {"required": False}, "match": {"pathPrefix": "/a"}, "backends": BACKEND}),
        # No extAuthz on this gateway: a waiting room cannot be honoured, the route is quarantined.
        route_doc("room", {"match": {"pathPrefix": "/room"}, "backends": BACKEND, "auth": {"required": False}, "waitingRoom": room}),
        # The same match as "a": the later one loses the conflict.
        route_doc("z-copy", {"auth": {"required": False}, "match": {"pathPrefix": "/a"}, "backends": BACKEND}),
    ]})
    stack.start(wait_path="/a")
    assert stack.get("/room").status == 404, "the quarantined route is not served"
    table = gatehouse_status(stack)
    assert table.returncode == 0, table.stdout + table.stderr  # every Envoy in sync: still a passing gate
    lines = table.stdout.splitlines()
    start = lines.index("quarantined routes (1, left out of the config):")
    assert lines[start + 1].startswith("    default/room: ") and "waitingRoom" in lines[start + 1], table.stdout
    start = lines.index("conflicting routes (1, left out of the config):")
    assert lines[start + 1].startswith("    default/z-copy (") and "default/a" in lines[start + 1], table.stdout
    document = json.loads(gatehouse_status(stack, "--json").stdout)
    assert set(document["quarantined"]) == {"default/room"}, "the text shows what --json has"
