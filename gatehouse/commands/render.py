"""`gatehouse render PATH [--config CP]`: the Envoy resources a route tree becomes, as YAML.

Routes the gateway would refuse (their protection cannot be enforced there) are left out,
as the control plane leaves them out, and named on stderr. With ``--config`` so are the
documents claiming a namespace the config's Git source may not claim (``--source`` names
the source when there are several).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from control_plane.cache.types import ResourceType
from control_plane.errors import InvalidEndpointsError
from control_plane.render import resource_data, to_yaml
from control_plane.model.references import permitted_routes
from control_plane.sources.files import load_documents_path
from control_plane.sources.static_endpoints import StaticEndpointTable, parse_endpoints
from control_plane.translator import EndpointTranslator, GatewaySettings, RouteTranslator
from control_plane.translator.from_config import gateway_settings
from gatehouse.commands.git_binding import NoSuchSource, add_source_argument, config_and_binding
from servicekit.errors import ConfigError


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("render", help="print the Envoy resources for a route tree as YAML")
    parser.add_argument("path", type=Path, metavar="PATH", help="a route file or a directory of them")
    parser.add_argument("--endpoints", type=Path, help="a static endpoints file, to render EDS too")
    parser.add_argument(
        "--config", type=Path, metavar="CONTROL_PLANE_YAML",
        help="render for this control plane's gateway (its extAuthz, rateLimit, ...); default: a gateway with none",
    )
    add_source_argument(parser)
    parser.add_argument("--listener-port", type=int, help="the listener's port (default: the config's, else 8080)")
    parser.add_argument("--type", choices=["CDS", "EDS", "LDS", "RDS"], action="append", help="only these types")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        config, binding = config_and_binding(args.config, args.source)
    except (ConfigError, NoSuchSource) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    found = load_documents_path(args.path, binding)
    if found.problems:
        for problem in found.problems:
            print(f"error: {problem}", file=sys.stderr)
        return 1
    for refused in found.refused:
        print(f"refused: {refused}", file=sys.stderr)
    # As the control plane would with this tree alone: no grants from a cluster.
    routes, unresolved = permitted_routes([found])
    for left_out in unresolved:
        print(f"warning: {left_out.route.id} left out: {left_out.message}", file=sys.stderr)
    table = StaticEndpointTable({})
    if args.endpoints is not None:
        try:
            table = parse_endpoints(args.endpoints.read_bytes(), str(args.endpoints))
        except (OSError, InvalidEndpointsError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    settings = GatewaySettings()
    if config is not None:
        settings = gateway_settings(config, config.gateway)
    if args.listener_port is not None:
        settings = dataclasses.replace(settings, listener_port=args.listener_port)
    translator = RouteTranslator(settings)
    translation = translator.translate(routes)
    for route_id, judged in sorted(translator.problems.items()):
        kind = "warning" if judged.served else "refused"
        print(f"{kind}: {judged.route.origin}: {route_id}: {judged.message}", file=sys.stderr)
    endpoints = EndpointTranslator().translate(translation.cluster_refs, table)
    by_type = {
        ResourceType.LISTENER: translation.listeners,
        ResourceType.ROUTE: translation.routes,
        ResourceType.CLUSTER: translation.clusters,
        ResourceType.ENDPOINT: tuple(endpoints),
    }
    wanted = set(args.type or [])
    out = {
        kind.short: [resource_data(r) for r in resources]
        for kind, resources in by_type.items()
        if not wanted or kind.short in wanted
    }
    sys.stdout.write(to_yaml(out))
    return 0
