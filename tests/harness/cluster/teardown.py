"""``down``: remove everything a cluster made, from whatever state ``up`` left.

Works from the state directory and the namespace alone, so it also cleans up after an
``up`` that failed or was interrupted, or a machine where a ``down`` was itself cut short.
In order:

1. the recorded daemons that manage containers (kubelet first, so nothing restarts them);
2. every process in the pods' cgroups (``cgroupRoot`` is named for the cluster, in each
   cgroup hierarchy), i.e. the containers;
3. every process left in the cluster's network namespace (containerd, its shims, the other
   components): the namespace is the cluster's own, so each of them is one it made;
4. every mount below the state directory (container root filesystems, volumes, the pods'
   network-namespace files), deepest first;
5. the pods' cgroup directories, the namespace and /etc/netns/<ns>, the kubelet's log
   links in /var/log/containers and libcni's cached results for the cluster's network;
6. the state directory.

Every process is signalled by pid, and only pids found by those rules.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from . import cgroups, daemons, layout, network

# Stopped one by one before the sweep: the kubelet must not restart what is being killed.
_ORDER = ("kubelet", "kube-proxy", "coredns", "kube-scheduler", "kube-controller-manager")


def _unescape(path: str) -> str:
    return path.encode().decode("unicode_escape") if "\\" in path else path


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below ``root`` in this mount namespace, deepest first."""
    prefix = str(root)
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = _unescape(line.split()[4])
        if point == prefix or point.startswith(prefix + "/"):
            found.append(point)
    return sorted(set(found), key=lambda point: point.count("/"), reverse=True)


def _unmount_all(root: Path) -> list[str]:
    for _ in range(5):
        points = mounts_under(root)
        if not points:
            return []
        for point in points:
            if subprocess.run(["umount", point], capture_output=True, timeout=30, check=False).returncode != 0:
                subprocess.run(["umount", "-l", point], capture_output=True, timeout=30, check=False)
    return mounts_under(root)


def down(cluster: layout.Layout, log: bool = True) -> list[str]:
    """Remove the cluster; returns what could not be removed (empty when clean)."""

    def say(message: str) -> None:
        if log:
            print(f"cluster: {message}", flush=True)

    leftovers: list[str] = []
    sandboxes_dir = cluster.containerd_root / "io.containerd.grpc.v1.cri" / "sandboxes"
    sandboxes = [entry.name for entry in sandboxes_dir.iterdir()] if sandboxes_dir.is_dir() else []
    try:
        existed_before = set(json.loads(cluster.marker.read_text()).get("existed_before", []))
    except (OSError, ValueError):
        existed_before = {str(path) for path in cluster.shared_dirs}  # unknown: keep them all
    started = time.monotonic()

    def lap(what: str) -> None:
        say(f"{what} ({time.monotonic() - started:.1f}s)")

    for name in _ORDER:
        daemons.stop(cluster, name, timeout=5)
    lap("components stopped")
    containers = cgroups.pids(cluster)
    if containers:
        say(f"stopping {len(containers)} container processes")
        daemons.terminate(containers, timeout=0)  # a cluster going away: no grace period
        lap("containers stopped")
    in_namespace = network.pids(cluster)
    recorded = daemons.recorded(cluster)
    if in_namespace or recorded:
        say(f"stopping {len(set(in_namespace) | set(recorded.values()))} processes in the cluster's namespace")
        daemons.terminate(sorted(set(in_namespace) | set(recorded.values())), timeout=1)
        lap("namespace emptied")
    # A process in the cgroups may have been started while the namespace was swept.
    daemons.terminate(cgroups.pids(cluster), timeout=0)
    left = _unmount_all(cluster.state) if cluster.state.exists() else []
    leftovers += [f"mount {point}" for point in left]
    lap("unmounted")
    for directory in cgroups.directories(cluster):
        try:
            directory.rmdir()
        except OSError as exc:
            leftovers.append(f"cgroup {directory}: {exc.strerror}")
    lap("cgroups removed")
    network.remove(cluster)
    if network.exists(cluster):
        leftovers.append(f"network namespace {cluster.netns}")
    lap("namespace removed")
    logs = Path("/var/log/containers")
    if logs.is_dir():
        for link in logs.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and os.readlink(link).startswith(str(cluster.pod_logs) + "/"):
                    link.unlink()
    results = Path("/var/lib/cni/results")
    if results.is_dir():
        # libcni's cache of each pod's ADD result: "<network>-<sandbox id>-<interface>",
        # for the cluster's network and containerd's loopback network ("cni-loopback").
        for cached in results.glob(f"{cluster.cni_network}-*"):
            cached.unlink(missing_ok=True)
        for sandbox in sandboxes:
            for cached in results.glob(f"cni-loopback-{sandbox}-*"):
                cached.unlink(missing_ok=True)
    for shared in cluster.shared_dirs:
        if str(shared) not in existed_before:
            with contextlib.suppress(OSError):
                shared.rmdir()  # only when empty: another cluster or tool may use it now
    if not left and cluster.state.exists():
        shutil.rmtree(cluster.state, ignore_errors=True)
        if cluster.state.exists():
            leftovers.append(f"state directory {cluster.state}")
        lap("state directory removed")
    with contextlib.suppress(OSError):
        cluster.state.parent.rmdir()  # the state root, when no other cluster uses it
    return leftovers
