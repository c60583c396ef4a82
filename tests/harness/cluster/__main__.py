"""``python -m tests.harness.cluster up|down|exec|status`` (what scripts/cluster runs)."""

from __future__ import annotations

import argparse
import os
import sys
import time

from . import chart, layout
from .cluster import Cluster, ClusterError
from .images import ImageError
from .tools import MissingTool


def _say(message: str) -> None:
    print(f"cluster: {message}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/cluster", description="A single-node Kubernetes cluster in a network namespace")
    parser.add_argument("--name", default=os.environ.get("GATEHOUSE_CLUSTER", layout.DEFAULT_NAME),
                        help="cluster name (default: $GATEHOUSE_CLUSTER or %(default)s)")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="build the images, start the cluster, install the chart and the example")
    up.add_argument("--no-chart", action="store_true", help="stop once the node is Ready")
    sub.add_parser("down", help="remove every process, container, mount, namespace and directory the cluster made")
    sub.add_parser("status", help="say whether the cluster runs")
    run = sub.add_parser("exec", help="run a command inside the cluster's namespace with KUBECONFIG set")
    run.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    cluster = Cluster(args.name)

    if args.command == "exec":
        command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        if not command:
            parser.error("exec needs a command: scripts/cluster exec -- kubectl get pods -A")
        if not cluster.running():
            _say(f"cluster {args.name} is not running: make cluster (scripts/cluster up)")
            return 1
        os.execvpe("ip", cluster.exec_argv(command), cluster.env())  # noqa: S606 - ip netns exec, list argv
    if args.command == "status":
        running = cluster.running()
        _say(f"cluster {args.name}: {'running' if running else 'not running'} ({cluster.layout.state})")
        return 0 if running else 1
    if args.command == "down":
        start = time.monotonic()
        leftovers = cluster.down(_say)
        _say(f"down in {time.monotonic() - start:.1f}s" + (f", {len(leftovers)} left" if leftovers else ": nothing left"))
        return 1 if leftovers else 0

    start = time.monotonic()
    try:
        cluster.up(_say)
        if not args.no_chart:
            chart.install_all(cluster, _say)
    except (ClusterError, ImageError, MissingTool, chart.ChartError) as exc:
        _say(f"up failed after {time.monotonic() - start:.0f}s: {exc}")
        _say(f"logs: {cluster.layout.logs}; remove what was made with: scripts/cluster down")
        return 1
    except KeyboardInterrupt:
        _say("interrupted: scripts/cluster down removes what was made")
        return 130
    _say(f"up in {time.monotonic() - start:.0f}s ({', '.join(f'{k} {v}s' for k, v in cluster.timings.items())})")
    if not args.no_chart:
        print(chart.instructions(cluster), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
