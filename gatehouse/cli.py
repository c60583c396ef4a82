"""`gatehouse <command>`: the one entry point for every service and tool.

Each command's module is imported only when that command runs: the services and every
ext_authz worker start through here, and importing every command would load the control
plane, the Kubernetes client and the other services into each of them (about 2 s of CPU
per process, and their memory).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

from gatehouse import __version__
from servicekit.logs import configure_logging

COMMANDS: dict[str, str] = {
    "control-plane": "control_plane",
    "ext-authz": "ext_authz",
    "ratelimit": "ratelimit",
    "telemetry": "telemetry",
    "validate": "validate",
    "render": "render",
    "bootstrap": "bootstrap",
    "crd": "crd",
    "status": "status",
    "breaker": "breaker",
    "dev": "dev",
    "revoke": "revocations",
    "block": "revocations",
    "unblock": "revocations",
    "revocations": "revocations",
    "token": "token",
    "apikey": "apikey",
}
"""Each command's name → its module in gatehouse.commands (one module may add several)."""


def _modules(names: Sequence[str]) -> list[ModuleType]:
    wanted = dict.fromkeys(COMMANDS[name] for name in names)
    return [importlib.import_module(f"gatehouse.commands.{module}") for module in wanted]


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser for ``command`` alone, or for every command (help, an unknown name)."""
    parser = argparse.ArgumentParser(prog="gatehouse", description="Gatehouse: the control side of an Envoy gateway")
    parser.add_argument("--version", action="version", version=f"gatehouse {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in _modules([command] if command in COMMANDS else list(COMMANDS)):
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv == ["--version"]:  # without loading every command to say so
        print(f"gatehouse {__version__}")
        return 0
    args = build_parser(argv[0] if argv else None).parse_args(argv)
    # Offline commands print data on stdout; their log lines must never mix into it.
    configure_logging("warning", "console")
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
