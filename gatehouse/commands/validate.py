"""`gatehouse validate PATH...`: judge route files exactly as the control plane would."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from control_plane.sources.files import load_route_path
from control_plane.translator.coverage import unenforced


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("validate", help="check route files; exit 1 with precise errors if any is bad")
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="a route file or a directory of them")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    total = 0
    failed = 0
    for path in args.paths:
        routes, problems = load_route_path(path)
        total += len(routes)
        for route in routes:
            # Whether auth is enforced depends on the control plane's extAuthz setting,
            # which validate cannot see; the control plane warns about that at run time.
            for warning in unenforced(route, ext_authz=True):
                print(f"warning: {route.origin}: {route.id}: {warning}", file=sys.stderr)
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        failed += len(problems)
    if failed:
        print(f"{failed} problem(s); nothing would be applied", file=sys.stderr)
        return 1
    print(f"ok: {total} route(s)")
    return 0
