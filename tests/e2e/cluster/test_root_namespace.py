"""Runs last among the cluster tests (conftest ORDER): ``down`` removes everything, and the
machine's own network namespace is exactly what it was before ``up``."""

from __future__ import annotations

import os
import re

from tests.e2e.cluster.conftest import KubeSession, root_namespace
from tests.harness.cluster import cgroups, daemons, network, teardown

_TEST_NETWORK = re.compile(r"gh(\d+)x\d+[rn]")
"""tests/harness/netns.py's veth names: another test process's network, not this cluster's."""


def _without_other_processes_test_networks(snapshot: dict[str, list[str]]) -> dict[str, list[str]]:
    """On a shared machine another suite's test network may come or go meanwhile; every
    other line must be identical."""
    def foreign(line: str) -> bool:
        return any(int(pid) != os.getpid() for pid in _TEST_NETWORK.findall(line))
    return {key: [line for line in lines if not foreign(line)] for key, lines in snapshot.items()}


def test_up_and_down_leave_the_root_namespace_as_it_was(kube: KubeSession) -> None:
    cluster = kube.cluster
    recorded = daemons.recorded(cluster.layout)
    assert {"etcd", "kube-apiserver", "kubelet", "containerd"} <= set(recorded)
    assert cgroups.pids(cluster.layout), "no container processes found in the cluster's cgroups"

    leftovers = cluster.down(print)

    assert leftovers == []
    assert not any(daemons.alive(pid) for pid in recorded.values())
    assert cgroups.pids(cluster.layout) == [] and cgroups.directories(cluster.layout) == []
    assert not network.exists(cluster.layout) and not cluster.layout.netns_etc.exists()
    assert not cluster.layout.state.exists()
    assert teardown.mounts_under(cluster.layout.state) == []
    after = root_namespace()
    assert _without_other_processes_test_networks(after) == _without_other_processes_test_networks(kube.before)
