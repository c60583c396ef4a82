"""The scaffold around every benchmark's measurements: its progress lines, its work
directory, the parts it starts (stopped whatever happens), its scenarios and the order of
its rounds.

A benchmark's ``main`` reads::

    args = parse_args(argv)
    with Run("authz", argv, args, progress) as run:
        redis = run.parts.add(RedisServer.start(log_dir=run.workdir / "redis"))
        ...
    run.print(baseline=..., ratios=...)

``Run`` times the run, stops the parts in reverse order on the way out (each one whatever
the others do) and removes the work directory unless ``--keep`` or ``--workdir`` was given;
``run.report`` is the document ``bench.kit.report`` describes.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, TypeVar

from bench.kit.envoy_config import fast_upstream_bootstrap
from bench.kit.report import command_line, new_report, print_report, work_directory
from tests.harness.envoy import EnvoyProcess
from tests.harness.gateway import GatewayStack
from tests.harness.ports import free_port
from tests.harness.processes import ManagedProcess, port_open

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The checkout: the stand-ins and services start with it as their working directory."""


class Progress:
    """Progress lines on stderr, ``[name HH:MM:SS] message``: stdout carries only the report."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, message: str) -> None:
        print(f"[{self.name} {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Stoppable(Protocol):
    def stop(self) -> object: ...


S = TypeVar("S", bound=Stoppable)


class _Callback:
    def __init__(self, stop: Callable[[], object], what: str) -> None:
        self.stop = stop
        self.what = what

    def __repr__(self) -> str:
        return self.what


class Parts:
    """What a run started (processes, gateways, receivers), stopped in reverse order."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._parts: list[Stoppable] = []

    def add(self, part: S) -> S:
        """Stop ``part`` with the others; add it before starting it if its start can fail
        half-way (a gateway stack whose Envoy never came up still has a control plane)."""
        self._parts.append(part)
        return part

    def on_stop(self, stop: Callable[[], object], what: str) -> None:
        """Call ``stop`` with the others (closing a client, say), in the same order."""
        self._parts.append(_Callback(stop, what))

    def stop(self) -> None:
        """Stop every part, the last added first. A part that fails to stop is reported and
        the others still stop; one that raises a BaseException (a cancelled client, Ctrl-C)
        is re-raised once the others have stopped: no process is left running."""
        while self._parts:
            part = self._parts.pop()
            try:
                part.stop()
            except Exception as exc:  # keep stopping the others
                self._progress(f"stopping {part!r}: {exc}")
            except BaseException:
                self.stop()
                raise


def add_workdir_arguments(parser: argparse.ArgumentParser) -> None:
    """``--workdir`` and ``--keep``, the same in every benchmark."""
    parser.add_argument("--workdir", help="where configs, logs and tool outputs go (default: a temporary directory, removed unless --keep)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary work directory")


class Run:
    """One benchmark run: its work directory, the parts it started, its report."""

    def __init__(self, benchmark: str, argv: list[str] | None, args: argparse.Namespace, progress: Progress) -> None:
        self.progress = progress
        self.workdir = work_directory(args.workdir, f"gatehouse-{benchmark.replace('_', '-')}-")
        self.keep = bool(args.keep or args.workdir)
        self.parts = Parts(progress)
        self.report = new_report(benchmark, command_line(argv))
        self.started = time.monotonic()

    def __enter__(self) -> Run:
        self.progress(f"work directory {self.workdir}")
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        try:
            self.parts.stop()
        finally:
            self.report["wall_s"] = round(time.monotonic() - self.started, 1)
            if not self.keep:
                shutil.rmtree(self.workdir, ignore_errors=True)

    def print(self, *, baseline: dict[str, Any], ratios: dict[str, Any], **more: Any) -> None:
        """Complete the report with its baseline, its ratios and ``more``, and print it."""
        self.report["baseline"] = baseline
        self.report["ratios"] = ratios
        self.report.update(more)
        print_report(self.report)


class Bench:
    """The base of a benchmark's driver: its arguments, its run's work directory and parts,
    and the gateways and stand-in servers it starts (each stopped with the run)."""

    def __init__(self, args: argparse.Namespace, run: Run) -> None:
        self.args = args
        self.workdir = run.workdir
        self.parts = run.parts

    def gateway(self, name: str, routes: list[dict[str, Any]], *, wait_path: str, extra: dict[str, Any] | None = None) -> GatewayStack:
        """A GatewayStack in ``<workdir>/<name>`` (control plane, Envoy, one echo upstream
        ``svc-a``) whose route repo holds ``routes``; started, and serving ``wait_path``."""
        stack = self.parts.add(GatewayStack(self.workdir / name, upstreams=("svc-a",), control_plane_extra=extra))
        stack.commit_routes({"routes.yaml": routes})
        stack.start(wait_path=wait_path)
        return stack

    def start_fast_upstream(self) -> tuple[EnvoyProcess, int]:
        """The fast upstream (``bench.kit.envoy_config``: a static Envoy answering 200 itself);
        its process and port once it accepts connections."""
        port, admin = free_port(), free_port()
        envoy = self.parts.add(EnvoyProcess.start(fast_upstream_bootstrap(port, admin), log_dir=self.workdir / "fast-upstream",
                                                  admin_port=admin, name="envoy-fast-upstream"))
        envoy.wait_live(30)
        envoy.process.wait_until(lambda: port_open(port), 30, f"fast upstream on :{port}")
        return envoy, port

    def start_standin(self, name: str, *args: str, log_name: str) -> tuple[ManagedProcess, int]:
        """``python -m bench.standins.<name> *args 127.0.0.1:<port>`` from the checkout; the
        process and its port once it accepts connections."""
        port = free_port()
        argv = [sys.executable, "-m", f"bench.standins.{name}", *args, f"127.0.0.1:{port}"]
        process = self.parts.add(ManagedProcess.start(argv, name=log_name, log_dir=self.workdir / "standins", cwd=REPO_ROOT))
        process.wait_until(lambda: port_open(port), 30, f"{log_name} on :{port}")
        return process, port


@dataclass(frozen=True)
class Scenario:
    """One measured case: a name, the path wrk loads and the status every answer should have.
    Each benchmark's scenarios add their own fields (keyword-only) to this."""

    name: str
    path: str
    description: str
    expect_status: int = 200

    def status_as_expected(self, load: dict[str, Any]) -> bool:
        """wrk counted the non-2xx/3xx answers a scenario expects (all or none), give or take 0.1 %."""
        requests = load["requests"]
        expected = requests if self.expect_status >= 400 else 0
        return bool(abs(load["status_errors"] - expected) <= max(1, requests // 1000))


def chosen(parser: argparse.ArgumentParser, names: str, known: Iterable[str], what: str = "scenarios") -> list[str]:
    """The comma-separated ``names``, each one of ``known`` (else the parser's usage error)."""
    wanted = [n for n in names.split(",") if n]
    known = list(known)
    unknown = [n for n in wanted if n not in known]
    if unknown:
        parser.error(f"unknown {what} {unknown}; known: {', '.join(known)}")
    return wanted


def round_order(items: Sequence[T], round_index: int) -> list[T]:
    """Rounds 0, 2, … in order and 1, 3, … reversed: drift on a shared machine hits every
    scenario alike."""
    return list(items) if round_index % 2 == 0 else list(reversed(items))
