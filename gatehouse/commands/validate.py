"""`gatehouse validate PATH...`: judge route files exactly as the control plane would.

A route naming a Service in another namespace that no ReferenceGrant among the files
permits gets a warning, not an error: a grant in the cluster may permit it when the
control plane also runs a Kubernetes source (docs/routes.md, "Cross-namespace backends").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from control_plane.model.references import permitted_routes
from control_plane.sources.files import load_documents_path
from control_plane.translator.coverage import unenforced


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("validate", help="check route files; exit 1 with precise errors if any is bad")
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="a route file or a directory of them")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    total = 0
    failed = 0
    for path in args.paths:
        found = load_documents_path(path)
        routes, problems = found.routes, found.problems
        total += len(routes)
        for unresolved in permitted_routes([found])[1]:
            route = unresolved.route
            print(
                f"warning: {route.origin}: {route.id}: not served unless a ReferenceGrant in the cluster permits it: {unresolved.message}",
                file=sys.stderr,
            )
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
