"""The cluster's long-running processes: started detached, remembered by pid file.

``up`` returns while they keep running, and ``down`` (maybe another process, maybe after
``up`` was interrupted) stops each by the pid recorded when it was started, never by
name. A pid file holds the pid and the process's start time (``/proc/<pid>/stat`` field
22), so a pid the kernel has since given to another process is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from . import layout


class DaemonError(RuntimeError):
    pass


_children: list[subprocess.Popen[bytes]] = []
"""Processes this process started: polled so that the exited ones do not stay zombies."""


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot, or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _pid_file(cluster: layout.Layout, name: str) -> Path:
    return cluster.pids / f"{name}.pid"


def start(cluster: layout.Layout, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    """Start ``argv`` in its own session, output to logs/<name>.log; record its pid."""
    cluster.logs.mkdir(parents=True, exist_ok=True)
    cluster.pids.mkdir(parents=True, exist_ok=True)
    with open(cluster.logs / f"{name}.log", "ab") as log:
        process = subprocess.Popen(  # noqa: S603 - our own binaries, list argv
            list(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, env=dict(env) if env is not None else None, close_fds=True,
        )
    _children.append(process)
    _pid_file(cluster, name).write_text(f"{process.pid} {start_time(process.pid) or ''}\n")
    return process.pid


def recorded(cluster: layout.Layout) -> dict[str, int]:
    """name → pid of every recorded process that still runs (and is the one started)."""
    found: dict[str, int] = {}
    if not cluster.pids.is_dir():
        return found
    for path in sorted(cluster.pids.glob("*.pid")):
        words = path.read_text().split()
        if not words:
            continue
        pid = int(words[0])
        started = words[1] if len(words) > 1 else None
        if alive(pid) and (started is None or start_time(pid) == started):
            found[path.stem] = pid
    return found


def pid_of(cluster: layout.Layout, name: str) -> int | None:
    return recorded(cluster).get(name)


def stop(cluster: layout.Layout, name: str, timeout: float = 10.0) -> None:
    """SIGTERM the recorded process, SIGKILL after ``timeout``; forget it."""
    pid = pid_of(cluster, name)
    if pid is not None:
        terminate([pid], timeout)
    with contextlib.suppress(FileNotFoundError):
        _pid_file(cluster, name).unlink()


def terminate(pids: Sequence[int], timeout: float) -> None:
    """SIGTERM each pid, wait up to ``timeout`` for all, SIGKILL the rest and wait."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        _reap()
        time.sleep(0.05)
    for pid in pids:
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        _reap()
        time.sleep(0.05)


def _reap() -> None:
    """Collect the exited processes this process started (only those: never waitpid(-1))."""
    for process in list(_children):
        if process.poll() is not None:
            _children.remove(process)


def wait_until(check: Callable[[], bool], timeout: float, what: str, cluster: layout.Layout, name: str | None = None) -> None:
    """Until ``check()``; a recorded process that exits meanwhile ends the wait with its log."""
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return
        if name is not None and pid_of(cluster, name) is None:
            raise DaemonError(f"{name} exited while waiting for {what}:\n{log_tail(cluster, name)}")
        if time.monotonic() > deadline:
            tail = f":\n{log_tail(cluster, name)}" if name else ""
            raise DaemonError(f"timed out after {timeout:.0f}s waiting for {what}{tail}")
        time.sleep(0.2)


def log_tail(cluster: layout.Layout, name: str, lines: int = 40) -> str:
    try:
        text = (cluster.logs / f"{name}.log").read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])
