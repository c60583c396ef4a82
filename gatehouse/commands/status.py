"""`gatehouse status`: every connected Envoy, what it ACKed versus the latest, and NACKs."""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from typing import Any


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("status", help="show connected Envoys, their config versions and NACKs")
    parser.add_argument("--admin", default="http://127.0.0.1:19000", help="control plane admin URL")
    parser.add_argument("--json", action="store_true", help="print the raw status document")
    parser.set_defaults(run=run)


def fetch_status(admin: str, timeout: float = 5.0) -> dict[str, Any]:
    with urllib.request.urlopen(admin.rstrip("/") + "/status", timeout=timeout) as response:  # noqa: S310
        data: dict[str, Any] = json.load(response)
        return data


def run(args: argparse.Namespace) -> int:
    try:
        status = fetch_status(args.admin)
    except (urllib.error.URLError, OSError) as exc:
        print(f"error: cannot reach the control plane at {args.admin}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(status, sys.stdout, indent=2)
        print()
        return 0
    print(render_status(status))
    behind = [p for p in status["proxies"] if _behind(p, status) or p["nacked"]]
    return 1 if behind else 0


def _latest(status: dict[str, Any], group: str) -> dict[str, str]:
    """The versions a proxy of ``group`` should have: its group's, else the default's."""
    groups: dict[str, dict[str, str]] = status.get("groups") or {}
    return groups.get(group) or groups.get("*") or {}


def _behind(proxy: dict[str, Any], status: dict[str, Any]) -> list[str]:
    latest = _latest(status, proxy["cluster"])
    wanted = set(proxy.get("subscribed") or latest)
    return [kind for kind, version in latest.items() if kind in wanted and proxy["acked"].get(kind) != version]


def render_status(status: dict[str, Any]) -> str:
    lines = [f"control plane: {'ready' if status['ready'] else 'NOT READY'} ({status['reason']})"]
    for source in status.get("sources", []):
        line = f"source {source['name']} ({source['kind']})"
        if source["kind"] == "git":
            line += f": serving {(source['serving'] or '-')[:12]}, {source['routes']} routes"
            if source.get("rejected"):
                line += f"; REJECTED {source['rejected']['commit'][:12]}"
        if source.get("error"):
            line += f"; error: {source['error']}"
        lines.append(line)
        for problem in (source.get("rejected") or {}).get("problems", []):
            lines.append(f"    {problem}")
    lines.append(f"{'NODE':24} {'CLUSTER':12} {'CDS':8} {'EDS':8} {'LDS':8} {'RDS':8} STATE")
    for proxy in status["proxies"]:
        behind = _behind(proxy, status)
        state = "NACKED" if proxy["nacked"] else ("BEHIND " + ",".join(behind) if behind else "in sync")
        versions = [proxy["acked"].get(kind, "-")[:8] for kind in ("CDS", "EDS", "LDS", "RDS")]
        lines.append(f"{proxy['node']:24} {proxy['cluster']:12} " + " ".join(f"{v:8}" for v in versions) + f" {state}")
        for kind, nack in proxy["nacked"].items():
            lines.append(f"    {kind} NACK: {nack['error']}")
            for route in nack["routes"]:
                lines.append(f"      caused by {route['route']} ({route['origin']})")
    return "\n".join(lines)
