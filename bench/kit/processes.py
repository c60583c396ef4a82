"""What /proc (and getrusage) say about the processes a benchmark measures (Linux): CPU time,
context switches, descendants, memory."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any


def stat_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat after the command name: index 0 is field 3 (state), 11 is utime."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()


def cpu_times(pid: int) -> tuple[float, float]:
    """(utime, stime) of a process, all its threads (/proc/<pid>/stat fields 14 and 15), seconds."""
    fields = stat_fields(pid)
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all threads)."""
    return sum(cpu_times(pid))


def context_switches(pid: int) -> int:
    """Voluntary + involuntary context switches of every thread of a process."""
    total = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            text = status.read_text()
        except OSError:  # the thread ended
            continue
        total += sum(int(line.split()[1]) for line in text.splitlines()
                     if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")))
    return total


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (children of every thread, recursively)."""
    found: list[int] = []
    stack = [pid]
    while stack:
        current = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{current}/task/{task}/children") as children:
                    kids = [int(p) for p in children.read().split()]
            except OSError:
                continue
            found.extend(kids)
            stack.extend(kids)
    return found


def process_tree(pid: int) -> list[int]:
    """``pid`` and every live descendant (ext_authz's supervisor and workers, if any)."""
    return [pid, *descendants(pid)]


def tree_cpu_times(pid: int) -> tuple[float, float]:
    """(utime, stime) summed over the process tree of ``pid``, seconds."""
    user = system = 0.0
    for member in process_tree(pid):
        try:
            u, s = cpu_times(member)
        except OSError:  # ended meanwhile
            continue
        user, system = user + u, system + s
    return user, system


def tree_cpu_with_reaped(pid: int) -> dict[str, Any]:
    """utime+stime (+ cutime+cstime: children already reaped) of ``pid`` and of every live
    descendant, seconds; ``per_pid`` the same for each process."""
    ticks = os.sysconf("SC_CLK_TCK")
    per_pid: dict[int, float] = {}
    for member in process_tree(pid):
        try:
            fields = stat_fields(member)
        except OSError:
            continue
        per_pid[member] = sum(int(fields[i]) for i in (11, 12, 13, 14)) / ticks
    return {"total": sum(per_pid.values()), "per_pid": per_pid}


def tree_context_switches(pid: int) -> int:
    """Context switches of every process of the tree of ``pid``."""
    return sum(context_switches(member) for member in process_tree(pid))


def machine_busy_seconds() -> float:
    """CPU seconds every process on the machine used (from /proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    """CPU seconds of this process's waited-for children (wrk runs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def memory_mib(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak RSS) of a process, MiB."""
    kib: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                kib[key] = int(value.split()[0])
    return {"VmRSS_mib": round(kib.get("VmRSS", 0) / 1024, 1), "VmHWM_mib": round(kib.get("VmHWM", 0) / 1024, 1)}


class CpuWindow:
    """CPU seconds used over one measured window (a wrk run, a drain after it): by each named
    process (all its threads; its descendants too if named in ``trees``), by wrk (this
    process's waited-for children) and by the whole machine, with the wall time."""

    def __init__(self, pids: Mapping[str, int], *, trees: Collection[str] = ()) -> None:
        self.pids = dict(pids)
        self.trees = set(trees)
        self.load_average = os.getloadavg()[0]
        """The 1-minute load average when the window opened."""
        self.before = self._read()
        self.started = time.monotonic()

    def _read(self) -> dict[str, float]:
        seconds = {name: sum(tree_cpu_times(pid)) if name in self.trees else cpu_seconds(pid) for name, pid in self.pids.items()}
        seconds["wrk"] = children_cpu_seconds()
        seconds["machine"] = machine_busy_seconds()
        return seconds

    def used(self) -> dict[str, float]:
        """Seconds used since the window opened, by name, ``wrk`` and ``machine``, and ``wall``."""
        after = self._read()
        wall = time.monotonic() - self.started
        return {**{name: after[name] - self.before[name] for name in after}, "wall": wall}


def request_costs(used: Mapping[str, float], roles: Sequence[str], requests: int) -> dict[str, float]:
    """``<role>_us_per_request`` (0.1 µs) and ``<role>_cores`` (0.001) of each role, in order."""
    costs: dict[str, float] = {}
    for role in roles:
        costs[f"{role}_us_per_request"] = round(used[role] * 1e6 / max(1, requests), 1)
        costs[f"{role}_cores"] = round(used[role] / used["wall"], 3)
    return costs


def machine_costs(used: Mapping[str, float], known: Collection[str], load_average: float) -> dict[str, float]:
    """The whole machine's busy cores over the window, the cores every process not in
    ``known`` used meanwhile (the noise), and the load average before it."""
    return {
        "machine_busy_cores": round(used["machine"] / used["wall"], 3),
        "other_processes_cores": round((used["machine"] - sum(used.get(k, 0.0) for k in known)) / used["wall"], 3),
        "load_average_1m_before": round(load_average, 2),
    }
