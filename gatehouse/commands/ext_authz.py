"""`gatehouse ext-authz --config FILE`: run the Authorization service for Envoy."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path

from control_plane.errors import ConfigError
from ext_authz.admin import CredentialError
from ext_authz.config import load_ext_authz_config
from ext_authz.runtime import ExtAuthz
from gatehouse.logs import configure_logging


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("ext-authz", help="run the ext_authz Authorization service (JWT, revocation)")
    parser.add_argument("--config", type=Path, required=True, help="ext_authz config file (YAML)")
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--log-format", choices=["json", "console"], default="json")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    try:
        config = load_ext_authz_config(args.config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_serve(ExtAuthz(config)))
    except (OSError, ValueError, CredentialError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


async def _serve(service: ExtAuthz) -> int:
    task = asyncio.create_task(service.run())
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return 0
