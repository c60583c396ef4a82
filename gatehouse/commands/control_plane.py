"""`gatehouse control-plane --config FILE`: run the xDS control plane."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path

from control_plane.config import load_config
from control_plane.errors import ConfigError
from control_plane.runtime import ControlPlane
from gatehouse.logs import configure_logging


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("control-plane", help="run the xDS control plane")
    parser.add_argument("--config", type=Path, required=True, help="control-plane config file (YAML)")
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--log-format", choices=["json", "console"], default="json")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(_serve(ControlPlane(config)))


async def _serve(plane: ControlPlane) -> int:
    task = asyncio.create_task(plane.run())
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return 0
