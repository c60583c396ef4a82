"""`gatehouse dev`: the whole stack on 127.0.0.1, from examples/routes, in one command.

Redis, two sample upstreams, ext_authz (trusting a local development issuer), ratelimit_svc
(a sample route allows 5 requests per 10 s), the control plane (reading routes from a local
Git repository seeded from examples/routes) and Envoy. Each step prints one verdict line
(`ok   redis up on 127.0.0.1:40123 (0.1 s)` or `FAIL <step>: <reason>`), and the first failure
stops everything. Then it prints tokens and curl lines to try. Edit a route in the printed
repository, commit, and Envoy serves the change within a second.

`--check` runs every printed curl line, the rate limit, the access log, the waiting room,
an API key, token swap, a breaker move (gatehouse/devstack/features.py) and a live route
change, one verdict line each, and exits: 0 when every step passed, 1 at the first failure.

SIGINT (Ctrl-C) and SIGTERM alike stop everything within a few seconds, at any point (also
started in the background of a script, where SIGINT would otherwise be ignored).
"""

from __future__ import annotations

import argparse
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from gatehouse.devstack.checks import banner, run_checks
from gatehouse.devstack.stack import STOP_SIGNALS, DevStack, Ports
from gatehouse.devstack.steps import StepFailed, Steps


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("dev", help="run the whole stack locally (Envoy, control plane, ext_authz, ratelimit, Redis, upstreams)")
    parser.add_argument("--port", type=int, default=8080, help="the gateway's HTTP port")
    parser.add_argument("--workdir", type=Path, default=Path(".gatehouse-dev"), help="logs, config, keys, routes repo")
    parser.add_argument("--reset", action="store_true", help="re-seed the routes repository from examples/routes")
    parser.add_argument(
        "--check", action="store_true", help="start, run the printed curl lines and a live route change (one verdict line each), stop"
    )
    parser.set_defaults(run=run)


class Stop(BaseException):
    """SIGINT or SIGTERM: unwinds whatever runs (a start, a check, the wait), so that
    everything is stopped at once. A BaseException, so no step takes it for its failure."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signal = signal.Signals(signum).name


class StopSignals:
    """The handler of both signals: raises Stop, or, inside ``held()``, once the block ends."""

    def __init__(self) -> None:
        self._holding = 0
        self._pending: int | None = None

    def install(self) -> None:
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self._holding:
            self._pending = signum
            return
        raise Stop(signum)

    @contextmanager
    def held(self) -> Iterator[None]:
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1
            if not self._holding and self._pending is not None:
                signum, self._pending = self._pending, None
                raise Stop(signum)


def run(args: argparse.Namespace) -> int:
    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    stops = StopSignals()
    stack = DevStack(workdir, Ports(listener=args.port), hold_stop=stops.held)
    steps = Steps()
    name = "dev check" if args.check else "dev"
    # Set explicitly: a shell without job control (a script, CI) starts background jobs with
    # SIGINT ignored, and Python then installs no handler of its own.
    stops.install()
    try:
        with steps.step("tools found (git, redis-server, envoy)"):
            stack.find_tools()
        with steps.step(f"routes repository {stack.repo}"):
            stack.seed_routes(reset=args.reset or args.check)
        stack.start(steps)
        print(banner(stack), flush=True)
        if args.check:
            run_checks(stack, steps)
            print(f"dev check: ok ({len(steps.passed)} steps)", flush=True)
            return 0
        while True:
            signal.pause()
    except StepFailed as failed:
        print(f"{name}: FAIL at step {len(steps.passed) + 1}: {failed.step}", flush=True)
        return 1
    except Stop as stopped:
        print(f"{name}: {stopped.signal}, stopping everything", flush=True)
        return 1 if args.check else 0
    finally:
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C does not cut the stop short
        stack.stop()
