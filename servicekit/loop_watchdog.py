"""Catch a callback that holds the event loop, as BlockHound does for Reactor.

One blocking call in a request handler stalls every request the process serves. The
loop refreshes a heartbeat every ``interval``; a monitor thread samples the loop
thread's stack once the heartbeat is ``threshold`` late (the culprit, usually) and,
when the loop beats again, reports the stall: a warning log line, a counter, and, when
``GATEHOUSE_LOOP_WATCHDOG_REPORT`` names a directory, a JSON line there that the test
suite turns into a failure. Works with any event loop (uvloop too): it only schedules a
timer and reads the thread's frames.

Time the loop thread spent waiting for a CPU is not counted (the kernel's schedstat
tells it apart): on a loaded machine that is the scheduler's delay, not a blocking
call. Nor is time the hypervisor took the virtual CPUs away (steal, in /proc/stat): the
thread looks as if it ran, yet neither it nor the monitor could (on this project's VMs,
100-300 ms pauses under load were reported as "kept the GIL"). The most any one CPU lost
is subtracted, which may excuse a short real block during heavy steal, never blame one.
A stall whose stack is the loop's own selector wait is not reported either.

Settings, from the environment: ``GATEHOUSE_LOOP_WATCHDOG`` is ``off``, ``on`` (100 ms)
or a threshold (``250ms``, ``1s``); unset, it is on under ``CI=true`` and off otherwise.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import re
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import structlog
from prometheus_client import Counter, Histogram

DEFAULT_THRESHOLD = 0.1
INTERVAL = 0.02
SETTING = "GATEHOUSE_LOOP_WATCHDOG"
REPORT_DIR = "GATEHOUSE_LOOP_WATCHDOG_REPORT"

STALLS = Counter("gatehouse_event_loop_stalls_total", "Times one callback held the event loop past the watchdog's threshold")
STALL_SECONDS = Histogram(
    "gatehouse_event_loop_stall_seconds",
    "How long each reported stall held the event loop",
    buckets=(0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)

_log = structlog.get_logger("loop_watchdog")


class WatchdogSettingError(ValueError):
    pass


def threshold_from(environ: Mapping[str, str]) -> float | None:
    """The configured threshold in seconds, or None when the watchdog is off."""
    value = environ.get(SETTING, "").strip().lower()
    if not value:
        ci = environ.get("CI", "").strip().lower() in {"true", "1", "yes"}
        return DEFAULT_THRESHOLD if ci else None
    if value in {"off", "0", "false", "no"}:
        return None
    if value in {"on", "1", "true", "yes"}:
        return DEFAULT_THRESHOLD
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s)", value)
    if match is None:
        raise WatchdogSettingError(f"{SETTING}={value!r}: expected off, on, or a threshold such as 100ms or 1s")
    seconds = float(match.group(1)) / (1000 if match.group(2) == "ms" else 1)
    if seconds < 2 * INTERVAL:
        raise WatchdogSettingError(f"{SETTING}={value!r}: the threshold must be at least {2 * INTERVAL * 1000:.0f}ms")
    return seconds


def _runqueue_wait(native_id: int) -> float | None:
    """Seconds the thread has waited for a CPU since it started (schedstat), if known."""
    try:
        with open(f"/proc/self/task/{native_id}/schedstat") as stat:
            return int(stat.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _steal(path: str = "/proc/stat") -> dict[str, float] | None:
    """Seconds of steal per CPU since boot (the hypervisor ran something else), if known."""
    try:
        with open(path) as stat:
            lines = stat.read().splitlines()
        return {
            fields[0]: int(fields[8]) / _CLOCK_TICKS
            for line in lines
            if line.startswith("cpu") and not line.startswith("cpu ") and len(fields := line.split()) > 8
        }
    except (OSError, ValueError):
        return None


def _most_stolen(before: dict[str, float] | None, after: dict[str, float] | None) -> float:
    if not before or not after:
        return 0.0
    return max((after[cpu] - before.get(cpu, after[cpu]) for cpu in after), default=0.0)


def _idle(stack: traceback.StackSummary) -> bool:
    """True if the loop thread was in its own wait for events, not in a callback."""
    if not stack:
        return False
    inner = stack[-1]
    if inner.filename.endswith("selectors.py"):
        return True
    # uvloop waits in C: the innermost Python frame is whoever called run_forever().
    return inner.name in {"run_forever", "run_until_complete", "run"} and f"{os.sep}asyncio{os.sep}" in inner.filename


@dataclass(frozen=True)
class Stall:
    held: float
    """Wall time past the expected beat, less the time spent waiting for a CPU and stolen."""
    wall: float
    runqueue: float
    steal: float
    stack: list[str]
    """Where the loop thread was once the stall passed the threshold; empty if the
    monitor could not run meanwhile (a C call that kept the GIL)."""

    def culprit(self) -> str:
        if not self.stack:
            return "not sampled: the loop thread kept the GIL throughout"
        return self.stack[-1].strip().replace("\n", " |")


class LoopWatchdog:
    """One per event loop; ``start`` from inside the loop, ``stop`` before it closes.

    The loop's own timer measures each stall exactly (``_tick``); the monitor thread
    only samples stacks, reads schedstat and reports, so a blocked loop costs it nothing.
    """

    def __init__(self, *, service: str, threshold: float, report_dir: Path | None = None, interval: float = INTERVAL) -> None:
        self.service = service
        self.threshold = threshold
        self.interval = interval
        self.report_dir = report_dir
        self.stalls: list[Stall] = []
        self._beat = time.monotonic()
        self._late: collections.deque[tuple[float, float]] = collections.deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._loop_ident = 0
        self._loop_native = 0
        self._healthy_wait = 0.0
        self._healthy_steal: dict[str, float] | None = None
        self._sampled: tuple[float, traceback.StackSummary] | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_ident = threading.get_ident()
        self._loop_native = threading.get_native_id()
        self._thread = threading.Thread(target=self._watch, name="loop-watchdog", daemon=True)
        self._thread.start()  # before the first beat: this start itself may wait for a CPU
        self._beat = time.monotonic()
        self._timer = self._loop.call_later(self.interval, self._tick)

    def stop(self) -> None:
        self._stopping.set()
        if self._timer is not None:
            self._timer.cancel()
        if self._thread is not None:
            self._thread.join(timeout=1)
            self._report_pending()

    def _tick(self) -> None:
        now = time.monotonic()
        if now - self._beat - self.interval > self.threshold:
            self._late.append((self._beat, now))
        self._beat = now
        assert self._loop is not None
        self._timer = self._loop.call_later(self.interval, self._tick)

    def _watch(self) -> None:
        self._healthy_wait = _runqueue_wait(self._loop_native) or 0.0
        self._healthy_steal = _steal()
        while not self._stopping.wait(self.interval):
            self._report_pending()
            beat = self._beat
            late = time.monotonic() - beat - self.interval
            if late < self.interval:
                self._healthy_wait = _runqueue_wait(self._loop_native) or self._healthy_wait
                self._healthy_steal = _steal() or self._healthy_steal
            elif late > self.threshold and (self._sampled is None or self._sampled[0] != beat):
                frame = sys._current_frames().get(self._loop_ident)
                self._sampled = (beat, traceback.extract_stack(frame) if frame is not None else traceback.StackSummary())

    def _report_pending(self) -> None:
        while self._late:
            started, ended = self._late.popleft()
            sampled = self._sampled[1] if self._sampled is not None and self._sampled[0] == started else None
            if sampled is not None and _idle(sampled):
                continue
            wait_after = _runqueue_wait(self._loop_native)
            runqueue = max(0.0, wait_after - self._healthy_wait) if wait_after is not None else 0.0
            steal = _most_stolen(self._healthy_steal, _steal())
            wall = ended - started - self.interval
            if wall - runqueue - steal > self.threshold:
                stack = (sampled or traceback.StackSummary()).format()
                self._report(Stall(held=wall - runqueue - steal, wall=wall, runqueue=runqueue, steal=steal, stack=stack))

    def _report(self, stall: Stall) -> None:
        self.stalls.append(stall)
        STALLS.inc()
        STALL_SECONDS.observe(stall.held)
        _log.warning(
            "event_loop_blocked",
            service=self.service,
            held_ms=round(stall.held * 1000),
            runqueue_ms=round(stall.runqueue * 1000),
            steal_ms=round(stall.steal * 1000),
            threshold_ms=round(self.threshold * 1000),
            culprit=stall.culprit(),
            stack="".join(stall.stack[-8:]),
        )
        if self.report_dir is not None:
            self._write(self.report_dir, stall)

    def _write(self, directory: Path, stall: Stall) -> None:
        record = {
            "service": self.service,
            "pid": os.getpid(),
            "held_ms": round(stall.held * 1000, 1),
            "wall_ms": round(stall.wall * 1000, 1),
            "runqueue_ms": round(stall.runqueue * 1000, 1),
            "steal_ms": round(stall.steal * 1000, 1),
            "threshold_ms": round(self.threshold * 1000),
            "culprit": stall.culprit(),
            "stack": stall.stack,
            "argv": sys.argv,
        }
        try:
            directory.mkdir(parents=True, exist_ok=True)
            with open(directory / f"{self.service}-{os.getpid()}.jsonl", "a") as out:
                out.write(json.dumps(record) + "\n")
        except OSError as exc:
            _log.error("event_loop_report_failed", error=str(exc))


def from_environment(service: str, environ: Mapping[str, str] = os.environ) -> LoopWatchdog | None:
    """The watchdog the environment asks for, or None; a bad setting raises with the reason."""
    threshold = threshold_from(environ)
    if threshold is None:
        return None
    report = environ.get(REPORT_DIR)
    return LoopWatchdog(service=service, threshold=threshold, report_dir=Path(report) if report else None)
