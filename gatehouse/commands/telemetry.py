"""`gatehouse telemetry --config FILE`: run the access-log service Envoy streams to."""

from __future__ import annotations

import argparse

from gatehouse.commands.serve import add_service_parser, run_service
from telemetry.config import load_telemetry_config
from telemetry.runtime import TelemetryProcess


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add_service_parser(subparsers, "telemetry", help="run the access-log service (Envoy ALS → Kafka, file or stdout)",
                       what="telemetry", run=run)


def run(args: argparse.Namespace) -> int:
    return run_service(args, load_telemetry_config, TelemetryProcess)
