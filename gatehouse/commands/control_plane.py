"""`gatehouse control-plane --config FILE`: run the xDS control plane."""

from __future__ import annotations

import argparse

from control_plane.config import load_config
from control_plane.runtime import ControlPlane
from gatehouse.commands.serve import add_service_parser, run_service


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add_service_parser(subparsers, "control-plane", help="run the xDS control plane", what="control-plane", run=run)


def run(args: argparse.Namespace) -> int:
    return run_service(args, load_config, ControlPlane)
