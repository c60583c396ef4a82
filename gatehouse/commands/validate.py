"""`gatehouse validate [--config CP] PATH...`: judge route files exactly as the control plane would.

Without ``--config`` the files are judged against the schema only. With the control
plane's config file they are also translated for that gateway, as the control plane
would: a route it would refuse (it asks for protection the gateway cannot enforce, or it
contradicts another route) is an error, a route it would serve without something it asks
for (``rateLimitsWithoutLimiter: serveUnlimited``) a warning. So is a route that reads
tokens and names no ``auth.issuers``: it takes every trusted issuer's tokens.

With ``--config``, the files are also bound as that config's Git source binds its own
(``--source`` names it when there are several): a document claiming a namespace the source
may not claim is an error, as the control plane refuses it (docs/control-plane-config.md).

A route naming a Service in another namespace that no ReferenceGrant among the files
permits gets a warning, not an error: a grant in the cluster may permit it when the
control plane also runs a Kubernetes source (docs/routes.md, "Cross-namespace backends").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from control_plane.model.auth import default_issuers_warning
from control_plane.model.conflicts import resolve_conflicts
from control_plane.model.fall_through import FallThroughs
from control_plane.model.references import permitted_routes
from control_plane.model.route import Route
from control_plane.sources.files import load_documents_path
from control_plane.translator import RouteTranslator
from control_plane.translator.from_config import gateway_settings
from gatehouse.commands.git_binding import NoSuchSource, add_source_argument, config_and_binding, shared_namespace_notes
from servicekit.errors import ConfigError


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("validate", help="check route files; exit 1 with precise errors if any is bad")
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="a route file or a directory of them")
    parser.add_argument(
        "--config",
        type=Path,
        metavar="CONTROL_PLANE_YAML",
        help="also judge the routes for this control plane's gateway: what it would refuse is an error",
    )
    add_source_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    routes: list[Route] = []
    errors: list[str] = []
    warnings: list[str] = []
    try:
        config, binding = config_and_binding(args.config, args.source)
    except (ConfigError, NoSuchSource) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in args.paths:
        found = load_documents_path(path, binding)
        routes.extend(found.routes)
        errors.extend(str(problem) for problem in found.problems)
        errors.extend(f"{problem} (the control plane serves the rest)" for problem in found.refused)
        for route in found.routes:
            if (unnamed := default_issuers_warning(route.spec.auth)) is not None:
                warnings.append(f"{route.origin}: {route.id}: {unnamed}")
        for unresolved in permitted_routes([found])[1]:
            route = unresolved.route
            warnings.append(
                f"{route.origin}: {route.id}: not served unless a ReferenceGrant in the cluster permits it: {unresolved.message}"
            )
    if config is None:
        # Without the gateway's settings, still what only the route set decides.
        kept, _ = resolve_conflicts(routes)
        index = FallThroughs(kept)
        warnings.extend(f"{route.origin}: {route.id}: {warning}" for route in kept for warning in index.of(route))
    else:
        warnings.extend(shared_namespace_notes(config, routes))
        kept, conflicts = resolve_conflicts(routes)
        errors.extend(f"{c.loser.origin}: {c.loser.id}: {c.message}" for c in conflicts)
        translator = RouteTranslator(gateway_settings(config, config.gateway))
        translator.translate(kept)
        for route_id, problem in sorted(translator.problems.items()):
            line = f"{problem.route.origin}: {route_id}: {problem.message}"
            (warnings if problem.served else errors).append(line)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for error in errors:
        print(f"error: {error}", file=sys.stderr)
    if errors:
        print(f"{len(errors)} problem(s); nothing would be applied", file=sys.stderr)
        return 1
    if args.config is None:
        print("note: judged against the schema only; pass --config with the control plane's config to judge what "
              "its gateway can enforce", file=sys.stderr)
    print(f"ok: {len(routes)} route(s)")
    return 0
