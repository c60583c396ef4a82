"""`gatehouse ratelimit --config FILE`: run the RateLimitService for Envoy."""

from __future__ import annotations

import argparse

from gatehouse.commands.serve import add_service_parser, run_service
from ratelimit_svc.config import load_ratelimit_config
from ratelimit_svc.runtime import RateLimitProcess


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add_service_parser(subparsers, "ratelimit", help="run the global rate-limit service (Redis, hybrid buckets)",
                       what="ratelimit", run=run)


def run(args: argparse.Namespace) -> int:
    return run_service(args, load_ratelimit_config, RateLimitProcess)
