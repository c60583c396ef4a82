"""What a benchmark's JSON says about where it ran: code revision, machine, tool versions."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]


def command_output(*argv: str, stderr: bool = False) -> str | None:
    """The first non-empty line a command prints (``stderr``: of its error stream), or None."""
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line.strip() for line in (result.stderr if stderr else result.stdout).splitlines() if line.strip()]
    return lines[0] if lines else None


def describe(packages: Sequence[str], watched: Sequence[str]) -> dict[str, Any]:
    """The fields every benchmark reports; ``watched``: the folders whose uncommitted
    changes would make the numbers belong to no commit."""
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
    }
