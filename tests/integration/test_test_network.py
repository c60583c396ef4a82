"""The test namespace: upstreams inside it are reachable from the root namespace, and it
leaves the machine's interfaces as it found them."""

from __future__ import annotations

import ipaddress
import subprocess
import sys
from pathlib import Path

from tests.harness import netns
from tests.harness.upstream import EchoUpstream, health_ok


def test_an_upstream_inside_is_reached_over_the_veth_and_nothing_is_left(tmp_path: Path) -> None:
    before = netns.root_addresses()
    with netns.test_network() as network:
        host = network.address()
        upstream = EchoUpstream.start("inside", log_dir=tmp_path, host=host, network=network)
        assert ipaddress.ip_address(host) in network.subnet and not ipaddress.ip_address(host).is_loopback
        assert health_ok(upstream.port, host), "the root namespace reaches the upstream over the veth pair"
        assert not health_ok(upstream.port, "127.0.0.1"), "the upstream must not listen on the root's loopback"
        assert upstream.pid in network.pids()
        during = netns.root_addresses()
        assert not any(f" {host}/" in line for line in during), "the host address exists only inside the namespace"
        added = [line for line in during if line not in before]
        assert added and all(line.split()[1].startswith("gh") for line in added), added  # only the veth's end
        namespace = network.namespace
    assert netns.root_addresses() == before
    assert namespace not in netns.ip("netns", "list")
    assert not upstream.alive(), "the namespace's processes are killed with it"
    upstream.stop()


def test_a_namespace_whose_owner_died_is_swept() -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    stale = f"{netns.PREFIX}{int(dead.stdout)}-0"
    try:
        netns.ip("netns", "add", stale)
    except netns.NetnsError as exc:
        netns.unavailable(str(exc))
    try:
        assert stale in netns.sweep_stale()
        assert stale not in netns.ip("netns", "list")
    finally:
        netns.ip("netns", "del", stale, check=False)
