"""The cgroup parent of the cluster's pods (kubelet's ``cgroupRoot``), in every hierarchy.

This machine mounts cgroup v1 hierarchies (plus an empty v2 one): kubelet with the
cgroupfs driver wants its cgroupRoot to exist in each before it starts, and creates the
pods' cgroups below it. Named for the cluster, it tells ``down`` which processes are the
cluster's containers and which cgroup directories to remove.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from . import layout


def mounts() -> list[tuple[Path, str]]:
    """(mount point, filesystem type) of each cgroup hierarchy."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fstype = right.split()[0]
        if fstype in ("cgroup", "cgroup2"):
            found.append((Path(left.split()[4]), fstype))
    return found


def create_parent(cluster: layout.Layout) -> None:
    for mount, fstype in mounts():
        parent = mount / cluster.cgroup_parent.lstrip("/")
        parent.mkdir(exist_ok=True)
        if fstype == "cgroup" and (mount / "cpuset.cpus").exists():
            # A new cpuset cgroup has no CPUs or memory nodes until given its parent's.
            for name in ("cpuset.cpus", "cpuset.mems"):
                if not (parent / name).read_text().strip():
                    (parent / name).write_text((mount / name).read_text())


def directories(cluster: layout.Layout) -> list[Path]:
    """The cluster's cgroup directories in every hierarchy, deepest first."""
    found: list[Path] = []
    for mount, _ in mounts():
        top = mount / cluster.cgroup_parent.lstrip("/")
        if top.is_dir():
            found.extend(Path(path) for path, _, _ in os.walk(top))
    return sorted(found, key=lambda path: len(path.parts), reverse=True)


def pids(cluster: layout.Layout) -> list[int]:
    """Every process in the cluster's cgroups: the containers."""
    found: set[int] = set()
    for directory in directories(cluster):
        with contextlib.suppress(OSError):
            found.update(int(word) for word in (directory / "cgroup.procs").read_text().split())
    return sorted(found)
