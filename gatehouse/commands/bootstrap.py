"""`gatehouse bootstrap`: print an Envoy bootstrap that points at the control plane."""

from __future__ import annotations

import argparse
import sys

import yaml

from gatehouse.envoy_bootstrap import OverloadSettings, render_bootstrap


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("bootstrap", help="print an Envoy bootstrap for this control plane")
    parser.add_argument("--xds", default="127.0.0.1:18000", help="control plane xDS host:port")
    parser.add_argument("--admin-port", type=int, default=9901)
    parser.add_argument("--node-id", default="gateway-0")
    parser.add_argument("--node-cluster", default="gateway", help="node group: proxies in one group share config")
    parser.add_argument("--delta", action="store_true", help="use incremental (delta) ADS")
    defaults = OverloadSettings()
    parser.add_argument(
        "--max-connections", type=int, default=defaults.max_connections,
        help="overload manager: downstream connections beyond this are closed at accept",
    )
    parser.add_argument(
        "--max-heap-bytes", type=int, default=defaults.max_heap_bytes,
        help="overload manager: heap budget (shrink at 95%%, stop connections at 95%%, 503 requests at 98%%)",
    )
    parser.add_argument("--no-overload-manager", action="store_true", help="leave the overload manager out")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    host, _, port = args.xds.rpartition(":")
    data = render_bootstrap(
        xds_host=host,
        xds_port=int(port),
        admin_port=args.admin_port,
        node_id=args.node_id,
        node_cluster=args.node_cluster,
        delta=args.delta,
        overload=None
        if args.no_overload_manager
        else OverloadSettings(max_connections=args.max_connections, max_heap_bytes=args.max_heap_bytes),
    )
    sys.stdout.write(yaml.safe_dump(data, sort_keys=False))
    return 0
