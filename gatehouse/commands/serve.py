"""What the long-running subcommands share: `--config FILE`, logging flags, a clean exit.

A bad config file exits 2 naming the file, field and reason; so does a startup failure
(a port in use, an unreadable credential). SIGTERM and SIGINT cancel the service, which
then shuts down in order (its own ``finally`` blocks) and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

import structlog

from servicekit.errors import ConfigError
from servicekit import loop_watchdog
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
    parser.set_defaults(run=run)
    return parser


def run_service(
    args: argparse.Namespace,
    load: Callable[[Path], ConfigT],
    build: Callable[[ConfigT], Service],
    *,
    startup_errors: tuple[type[Exception], ...] = (),
) -> int:
    configure_logging(args.log_level, args.log_format)
    try:
        config = load(args.config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    failures: tuple[type[Exception], ...] = (OSError, ValueError, *startup_errors)
    try:
        return asyncio.run(_serve(build(config), args.command))
    except failures as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


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
