"""``py-spy record`` on a benchmark's process, and what its raw stacks say: shares of the
running samples by category, thread, leaf and function on the stack. Every benchmark's
``--profile…`` options drive this one module; each says only which categories it cares
about and which function is its handler."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.kit.run import REPO_ROOT


Categories = Sequence[tuple[str, tuple[str, ...]]]
"""(category, needles): the innermost frame containing one of a category's needles names it."""


def binary() -> str | None:
    """py-spy beside this Python (the venv's), else on PATH."""
    return shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")


class Profiler:
    """py-spy record (raw; ``threads``: stacks by thread, ``native``: with C frames, ``gil``:
    only the thread holding the GIL) on ``pid`` until ``stop()``, which returns
    ``summarise(output)``. With ``duration_s`` py-spy stops by itself and ``stop()`` waits
    for it; without, ``stop()`` interrupts it."""

    def __init__(self, pid: int, output: Path, rate: int, summarise: Callable[[Path], dict[str, Any]], *,
                 native: bool = True, gil: bool = False, threads: bool = True, duration_s: int | None = None,
                 attach_s: float = 1.0, stop_timeout: float = 60, option: str = "--profile-dir") -> None:
        py_spy = binary()
        if py_spy is None:
            raise SystemExit(f"{option} needs py-spy: .venv/bin/pip install py-spy")
        self.output = output
        self.summarise = summarise
        self.stop_timeout = stop_timeout
        self.duration_s = duration_s
        output.parent.mkdir(parents=True, exist_ok=True)
        argv = [py_spy, "record", "-p", str(pid), "-r", str(rate), "-f", "raw"]
        if threads:
            argv.append("--threads")
        if duration_s is not None:
            argv += ["--duration", str(duration_s)]
        if gil:  # only the thread holding the GIL: where Python CPU time goes, no idle waits
            argv.append("--gil")
        if native:  # C frames too: the garbage collector, grpc, crypto and protobuf C code by name
            argv.append("--native")
        argv += ["-o", str(output)]
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(attach_s)  # attach before the load starts
        if self.process.poll() is not None:
            raise SystemExit(f"py-spy failed: {self.process.stderr.read().decode() if self.process.stderr else ''}")

    def stop(self) -> dict[str, Any]:
        if self.process.poll() is None:
            if self.duration_s is None:
                self.process.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            try:
                self.process.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if not self.output.exists():
            error = self.process.stderr.read().decode()[-500:] if self.process.stderr else ""
            return {"error": f"no py-spy output: {error}"}
        return self.summarise(self.output)


def raw_samples(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(count, frames outermost first) of each stack of a ``py-spy record -f raw`` file."""
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        yield int(count_text), stack.split(";")


def frame_name(frame: str, markers: Sequence[str] = ("site-packages/", "lib/python3"), *, bare: bool = False) -> str:
    """'Check (/…/site-packages/grpc/aio/_server.py:12)' → 'Check (grpc/aio/_server.py)'; a
    path in this repository relative to it (the first of ``markers`` in the path cuts it);
    ``bare``: a frame with no path is its name alone."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    for marker in markers:
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    else:
        if str(REPO_ROOT) in path:
            path = path.split(str(REPO_ROOT) + "/", 1)[1]
    return name if bare and not path else f"{name} ({path})"


def category(frames: list[str], categories: Categories, other: str = "other") -> str:
    """The category of the innermost frame that contains one of a category's needles."""
    for frame in reversed(frames):
        for name, needles in categories:
            if any(n in frame for n in needles):
                return name
    return other


IDLE_LEAVES = ("epoll_wait", "epoll_pwait", "poll (", "select (")
"""A thread blocked here is waiting for work, not using CPU."""
QUEUE_WAITS = ("_queue_SimpleQueue_get", "PyThread_acquire_lock_timed", "pthread_cond_timedwait")
"""Anywhere on the stack: an executor thread waiting on its queue."""
SYSCALL_LEAVES = ("sendmsg", "recvmsg", "recv", "send", "write", "read", "eventfd_write", "eventfd_read", "writev", "syscall", "getpid")


def state(frames: list[str], queue_waits: tuple[str, ...] = QUEUE_WAITS, idle_leaves: tuple[str, ...] = IDLE_LEAVES,
          gil_waits: bool = True) -> str:
    """idle (waiting for work), gil_wait (runnable, waiting for the GIL; only if ``gil_waits``), or running."""
    if frames[-1].startswith(idle_leaves):
        return "idle"
    if gil_waits and any(f.startswith("take_gil") for f in frames):
        return "gil_wait"
    if any(f.startswith(queue_waits) for f in frames):
        return "idle"
    return "running"


def summarise_profile(path: Path, categories: Categories, handler: tuple[str, str | tuple[str, ...]] | None = None, *, top: int = 25,
                      inclusive_top: int | None = None, queue_waits: tuple[str, ...] = QUEUE_WAITS,
                      idle_leaves: tuple[str, ...] = IDLE_LEAVES, gil_waits: bool = True, running_only: bool = True,
                      syscall_leaves: Collection[str] = SYSCALL_LEAVES, syscall_prefixes: tuple[str, ...] = (),
                      frame: Callable[[str], str] = frame_name, keep_bare_frames: bool = False, other: str = "other",
                      share_inside: dict[str, str] | None = None, named: Collection[str] | None = None,
                      project: Sequence[str] | None = None) -> dict[str, Any]:
    """Shares of the running samples (idle and GIL waits counted apart; every sample when not
    ``running_only``): by category (innermost named frame, else ``other``), by thread, by leaf
    (self), by function anywhere on the stack (inclusive).

    ``handler``: (key, frame prefix or prefixes): how much runs inside that function, by
    category; ``share_inside``: more {key: frame prefix}, the share alone; ``named``:
    categories whose functions go to ``inclusive_named``; ``project``: folders whose
    functions go to ``inclusive_project``. ``frame`` names a frame (``keep_bare_frames``: frames
    with no source path too, e.g. native ones); a leaf in ``syscall_leaves`` or starting with
    one of ``syscall_prefixes`` is a system call."""
    self_counts: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    categories_seen: Counter[str] = Counter()
    in_handler: Counter[str] = Counter()
    inside: Counter[str] = Counter()
    named_counts: Counter[str] = Counter()
    syscalls: Counter[str] = Counter()
    states: Counter[str] = Counter()
    share_inside = share_inside or {}
    total = handled = 0
    for count, frames in raw_samples(path):
        thread = re.sub(r"\(\d+\): ", "", next((f for f in frames if f.startswith("thread ")), "thread ?"))
        functions = [frame(f) for f in frames if (keep_bare_frames or " (" in f) and not f.startswith(("process ", "thread "))]
        if not functions:
            continue
        sample_state = state(functions, queue_waits, idle_leaves, gil_waits)
        states[sample_state] += count
        if running_only and sample_state != "running":
            continue
        total += count
        threads[thread] += count
        self_counts[functions[-1]] += count
        for function in set(functions):
            inclusive[function] += count
        sample_category = category(functions, categories, other)
        categories_seen[sample_category] += count
        leaf = functions[-1].split(" (", 1)[0]
        if leaf in syscall_leaves or (syscall_prefixes and leaf.startswith(syscall_prefixes)):
            syscalls[f"{leaf} under {sample_category}"] += count
        if handler is not None and any(f.startswith(handler[1]) for f in functions):
            handled += count
            in_handler[sample_category] += count
        for key, prefix in share_inside.items():
            if any(f.startswith(prefix) for f in functions):
                inside[key] += count
        if named is not None:
            for function in {f for f in functions if category([f], categories, other) in named}:
                named_counts[function] += count

    def shares(counter: Counter[str], n: int = top) -> list[dict[str, Any]]:
        return [{"name": f, "share": round(c / total, 3), "samples": c} for f, c in counter.most_common(n)] if total else []

    summary: dict[str, Any] = {
        "raw_file": str(path),
        "samples_by_state": dict(states),
        "running_samples": total,
        "idle_samples": sum(c for s, c in states.items() if s != "running"),
        "categories": shares(categories_seen),
    }
    if handler is not None:
        summary[handler[0]] = {"share": round(handled / total, 3) if total else None, "by_category": shares(in_handler)}
    for key in share_inside:
        summary[key] = round(inside[key] / total, 3) if total else None
    summary.update({
        "syscall_leaves": shares(syscalls, 12),
        "by_thread": shares(threads, 10),
        "self": shares(self_counts),
        "inclusive": shares(inclusive, inclusive_top or top),
    })
    if named is not None:
        summary["inclusive_named"] = shares(named_counts, 40)
    if project is not None:
        in_project = Counter({k: v for k, v in inclusive.items() if any(k.endswith(f"({d}") or f"({d}" in k for d in project)})
        summary["inclusive_project"] = shares(in_project, 15)
    return summary
