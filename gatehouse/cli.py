"""`gatehouse <command>`: the one entry point for every service and tool."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gatehouse import __version__
from gatehouse.commands import (
    apikey,
    bootstrap,
    breaker,
    control_plane,
    crd,
    dev,
    ext_authz,
    ratelimit,
    render,
    revocations,
    status,
    telemetry,
    token,
    validate,
)
from servicekit.logs import configure_logging

COMMANDS = (control_plane, ext_authz, ratelimit, telemetry, validate, render, bootstrap, crd, status, breaker, dev, revocations, token, apikey)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gatehouse", description="Gatehouse: the control side of an Envoy gateway")
    parser.add_argument("--version", action="version", version=f"gatehouse {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Offline commands print data on stdout; their log lines must never mix into it.
    configure_logging("warning", "console")
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
