"""`gatehouse telemetry --config FILE`: run the access-log service Envoy streams to."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path

from control_plane.errors import ConfigError
from gatehouse.logs import configure_logging
from telemetry.config import load_telemetry_config
from telemetry.runtime import TelemetryProcess


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("telemetry", help="run the access-log service (Envoy ALS → Kafka, file or stdout)")
    parser.add_argument("--config", type=Path, required=True, help="telemetry config file (YAML)")
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--log-format", choices=["json", "console"], default="json")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    try:
        config = load_telemetry_config(args.config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_serve(TelemetryProcess(config)))
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


async def _serve(process: TelemetryProcess) -> int:
    task = asyncio.create_task(process.run())
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return 0
