"""What the long-running subcommands share: `--config FILE`, logging flags, a clean exit.

A bad config file exits 2 naming the file, field and reason; so does a startup failure
(a port in use, an unreadable credential). SIGTERM and SIGINT cancel the service, which
then shuts down in order (its own ``finally`` blocks) and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import signal
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import structlog

from servicekit.errors import ConfigError
from servicekit import loop_watchdog
from servicekit.started_executor import started_executor
from servicekit.workers import Supervisor, available_cpus
from servicekit.logs import configure_logging

ConfigT = TypeVar("ConfigT")


class Service(Protocol):
    async def run(self) -> None: ...


def add_service_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    *,
    help: str,  # noqa: A002 - argparse's own word
    what: str,
    run: Callable[[argparse.Namespace], int],
) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(name, help=help)
    parser.add_argument("--config", type=Path, required=True, help=f"{what} config file (YAML)")
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--log-format", choices=["json", "console"], default="json")
    # Set by the worker supervisor (servicekit/workers.py) on the processes it starts.
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.set_defaults(run=run)
    return parser


@dataclass(frozen=True, slots=True)
class Workers:
    """How a service runs as several processes: how many, and the addresses involved."""

    count: int | None
    """None: the CPUs this process may use."""
    service_addresses: tuple[str, ...]
    metrics_address: str


def run_service(
    args: argparse.Namespace,
    load: Callable[[Path], ConfigT],
    build: Callable[[ConfigT], Service],
    *,
    startup_errors: tuple[type[Exception], ...] = (),
    workers: Callable[[ConfigT], Workers] | None = None,
    uvloop: bool = False,
) -> int:
    """``workers``: the service may run as several processes under a supervisor;
    ``uvloop``: its event loop is uvloop's (the HTTP check path; grpc.aio runs on it too)."""
    configure_logging(args.log_level, args.log_format)
    try:
        config = load(args.config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    failures: tuple[type[Exception], ...] = (OSError, ValueError, *startup_errors)
    try:
        plan = workers(config) if workers is not None and args.worker is None else None
        count = (plan.count or available_cpus()) if plan is not None else 1
        if plan is not None and count > 1:
            argv = [sys.executable, "-m", "gatehouse", args.command, "--config", str(args.config),
                    "--log-level", args.log_level, "--log-format", args.log_format]  # fmt: skip
            supervisor = Supervisor(argv, workers=count, metrics_address=plan.metrics_address, service_addresses=plan.service_addresses)
            return _run(_serve(supervisor, f"{args.command}-supervisor"), uvloop=False)
        return _run(_serve(build(config), args.command), uvloop=uvloop)
    except failures as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _run(main: Coroutine[Any, Any, int], *, uvloop: bool) -> int:
    # The imports' garbage is collected here, before the loop runs: one full collection
    # holds the GIL for 60 ms idle and 140 ms on a loaded machine (a stall the watchdog
    # caught in a worker). Once started, each service only freezes what it built.
    gc.collect()
    gc.freeze()
    # Likewise every to_thread thread: started on the loop, each start waits for the new
    # thread to be scheduled (servicekit/started_executor.py).
    executor = started_executor()

    async def with_executor() -> int:
        asyncio.get_running_loop().set_default_executor(executor)
        return await main

    if not uvloop:
        return asyncio.run(with_executor())
    import uvloop as uv

    with asyncio.Runner(loop_factory=uv.new_event_loop) as runner:
        return runner.run(with_executor())


async def _serve(service: Service, name: str) -> int:
    watchdog = loop_watchdog.from_environment(name)
    if watchdog is not None:
        watchdog.start()
        structlog.get_logger("serve").info("loop_watchdog_on", threshold_ms=round(watchdog.threshold * 1000))
    task = asyncio.create_task(service.run())
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    try:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    finally:
        if watchdog is not None:
            watchdog.stop()
    return 0
