"""`gatehouse dev`: the whole stack on 127.0.0.1, from examples/routes, in one command.

Redis, two sample upstreams, ext_authz (trusting a local development issuer), ratelimit_svc
(a sample route allows 5 requests per 10 s), the control plane (reading routes from a local Git repository seeded from examples/routes) and Envoy.
It checks that requests really flow, then prints tokens and curl lines to try. Edit a
route in the printed repository, commit, and Envoy serves the change within a second.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from gatehouse.devstack.checks import banner, run_checks
from gatehouse.devstack.stack import DevStack, Ports


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("dev", help="run the whole stack locally (Envoy, control plane, ext_authz, ratelimit, Redis, upstreams)")
    parser.add_argument("--port", type=int, default=8080, help="the gateway's HTTP port")
    parser.add_argument("--workdir", type=Path, default=Path(".gatehouse-dev"), help="logs, config, keys, routes repo")
    parser.add_argument("--reset", action="store_true", help="re-seed the routes repository from examples/routes")
    parser.add_argument("--check", action="store_true", help="start, run the printed curl lines, make a live route change, stop")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    stack = DevStack(workdir, Ports(listener=args.port))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stack.seed_routes(reset=args.reset or args.check)
        stack.start()
        print(banner(stack), flush=True)
        if args.check:
            failures = run_checks(stack)
            for failure in failures:
                print(f"FAIL {failure}", file=sys.stderr)
            print("dev check: " + ("ok" if not failures else f"{len(failures)} failure(s)"), flush=True)
            return 1 if failures else 0
        stop.wait()
        return 0
    except KeyboardInterrupt:
        return 0
    except TimeoutError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        stack.stop()
