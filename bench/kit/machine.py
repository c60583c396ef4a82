"""Where a benchmark ran (code revision, machine, tool versions), and two probes of how busy
and how fast that machine is right now: it is shared, and other sessions' work comes and goes."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import time
from collections.abc import Sequence
from typing import Any

from bench.kit.processes import machine_busy_seconds
from bench.kit.run import REPO_ROOT



def command_output(*argv: str, stderr: bool = False) -> str | None:
    """The first non-empty line a command prints (``stderr``: of its error stream), or None."""
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line.strip() for line in (result.stderr if stderr else result.stdout).splitlines() if line.strip()]
    return lines[0] if lines else None


def describe(packages: Sequence[str], watched: Sequence[str], **extra: Any) -> dict[str, Any]:
    """The ``machine`` of every report; ``watched``: the folders whose uncommitted changes
    would make the numbers belong to no commit; ``extra``: more fields (tool versions)."""
    from tests.harness.envoy import envoy_binary

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=30).stdout.rstrip("\n")

    versions: dict[str, str | None] = {}
    for dist in packages:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    try:
        envoy = command_output(envoy_binary(), "--version")
    except Exception:  # no Envoy: the report says so instead of failing
        envoy = None
    return {
        "git_head": git("rev-parse", "--short", "HEAD"),
        "git_dirty": [line[3:] for line in git("status", "--porcelain", "--", *watched).splitlines()],
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "platform": platform.platform(),
        "envoy": envoy,
        "wrk": command_output("wrk", "-v"),
        "packages": versions,
        **extra,
    }


def wait_quiet(max_cores: float, max_wait_s: float) -> dict[str, Any]:
    """Wait (at most ``max_wait_s``) for a second in which the whole machine used at most
    ``max_cores`` (our own processes idle between scenarios); ``{}`` if ``max_cores`` <= 0."""
    if max_cores <= 0:
        return {}
    started = time.monotonic()
    while True:
        before = machine_busy_seconds()
        time.sleep(1.0)
        busy = machine_busy_seconds() - before
        waited = time.monotonic() - started
        if busy <= max_cores or waited >= max_wait_s:
            return {"waited_s": round(waited, 1), "busy_cores_last_second": round(busy, 2), "quiet": busy <= max_cores}


def cpu_speed_probe(iterations: int = 1_000_000) -> float:
    """ns per iteration of a fixed pure-Python loop (one core, this process): how fast the
    VM's CPU is right now. This machine's vCPUs have been seen 4-5x slower than at other
    times, with nothing else busy; compare numbers from different runs only through ratios."""
    started = time.perf_counter()
    total = 0
    for i in range(iterations):
        total += i
    return round((time.perf_counter() - started) * 1e9 / iterations, 1)
