"""`gatehouse status`: every connected Envoy, what it ACKed versus the latest, NACKs, the
routes left out of the config (quarantined, refused, losing a conflict, or missing a
ReferenceGrant), and the route breakers (``GET /breakers``; `gatehouse breaker` moves them).
Where the control plane's reads need a credential, ``--credential-file`` (``admin_credential``)."""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from gatehouse.commands import admin_credential
from gatehouse.commands.breaker import render_breakers
from servicekit.bearer import BearerCredentialError


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("status", help="show connected Envoys, their config versions and NACKs")
    parser.add_argument("--admin", default="http://127.0.0.1:19000", help="control plane admin URL")
    parser.add_argument("--json", action="store_true", help="print the raw status document")
    parser.add_argument("--node", help="show only this Envoy (its node id)")
    parser.add_argument("--diff", action="store_true", help="with --node: how its ACKed config differs from the latest")
    admin_credential.add_argument(parser)
    parser.set_defaults(run=run)


def _get_json(admin: str, path: str, timeout: float, headers: dict[str, str]) -> dict[str, Any]:
    request = urllib.request.Request(admin.rstrip("/") + path, headers=headers)  # noqa: S310
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
        data: dict[str, Any] = json.load(response)
        return data


def fetch_status(admin: str, timeout: float = 5.0, headers: dict[str, str] | None = None) -> dict[str, Any]:
    return _get_json(admin, "/status", timeout, headers or {})


def fetch_breakers(admin: str, timeout: float = 5.0, headers: dict[str, str] | None = None) -> list[dict[str, Any]] | None:
    """The route breakers, or None from a control plane without them (older, or unreachable now)."""
    try:
        breakers: list[dict[str, Any]] = _get_json(admin, "/breakers", timeout, headers or {})["breakers"]
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError):
        return None
    return breakers


def fetch_node(admin: str, node: str, *, diff: bool = False, timeout: float = 30.0, headers: dict[str, str] | None = None) -> dict[str, Any]:
    query = {"node": node, **({"diff": "1"} if diff else {})}
    try:
        return _get_json(admin, "/status/node?" + urllib.parse.urlencode(query), timeout, headers or {})
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            detail = json.load(exc)
            raise LookupError(f"{detail['error']}; connected: {', '.join(detail['connected']) or 'none'}") from None
        raise


def _node_behind(node: dict[str, Any]) -> list[str]:
    """Types whose diff is not empty, or (without --diff) whose ACKed version is not the latest."""
    if "diff" in node:
        return sorted(node["diff"])
    return [kind for kind in node["subscribed"] if node["acked"].get(kind) != node["latest"].get(kind)]


def render_node(node: dict[str, Any], *, diff: bool) -> str:
    lines = [f"node {node['node']} (cluster {node['cluster']}, {node['protocol']})"]
    behind = _node_behind(node)
    for kind in sorted(set(node["subscribed"]) | set(node["acked"])):
        acked, latest = node["acked"].get(kind, "-"), node["latest"].get(kind, "-")
        state = "BEHIND" if kind in behind else "in sync"
        waiting = node["unacked_seconds"].get(kind)
        if waiting is not None:
            state += f", push unACKed for {waiting:.0f}s"
        lines.append(f"  {kind:4} acked {acked[:12]:12} latest {latest[:12]:12} {state}")
        if kind in node["nacked"]:
            lines.append(f"       NACK: {node['nacked'][kind]['error']}")
    if diff:
        if not node["diff"]:
            lines.append("no difference: this node runs the latest config")
        for kind, change in sorted(node["diff"].items()):
            for name in change["added"]:
                lines.append(f"{kind} + {name} (missing on the node)")
            for name in change["removed"]:
                lines.append(f"{kind} - {name} (the latest drops it)")
            for name, text in change["changed"].items():
                lines.append(f"{kind} ~ {name}")
                lines.extend("    " + line for line in text.rstrip("\n").splitlines())
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.diff and not args.node:
        print("error: --diff needs --node <node id>", file=sys.stderr)
        return 2
    try:
        headers = admin_credential.read_headers(args.credential_file)
        document = fetch_node(args.admin, args.node, diff=args.diff, headers=headers) if args.node else fetch_status(args.admin, headers=headers)
    except (LookupError, BearerCredentialError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            print(f"error: the control plane at {args.admin} {admin_credential.REFUSED}", file=sys.stderr)
        else:
            print(f"error: the control plane at {args.admin} answered {exc.code}: {exc.reason}", file=sys.stderr)
        return 2
    except (urllib.error.URLError, OSError) as exc:
        print(f"error: cannot reach the control plane at {args.admin}: {exc}", file=sys.stderr)
        return 2
    breakers = None if args.node else fetch_breakers(args.admin, headers=headers)
    if args.json:
        if breakers is not None:
            document = {**document, "breakers": breakers}
        json.dump(document, sys.stdout, indent=2)
        print()
        if not args.node:
            return 0  # the raw document; no verdict
    else:
        print(render_node(document, diff=args.diff) if args.node else render_status(document))
        if breakers:
            print("\nroute breakers:\n" + render_breakers(breakers))
    if args.node:
        behind = bool(_node_behind(document) or document["nacked"])
    else:
        behind = any(_behind(p, document) or p["nacked"] for p in document["proxies"])
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
    for left_out in status.get("unresolved") or []:
        lines.append(f"route {left_out['route']} ({left_out['origin']}) NOT SERVED, ResolvedRefs=False: {left_out['detail']}")
    kinds = ["CDS", "EDS", "LDS", "RDS"] + (["SDS"] if any("SDS" in p["subscribed"] for p in status["proxies"]) else [])
    lines.append(f"{'NODE':24} {'CLUSTER':12} " + " ".join(f"{k:8}" for k in kinds) + " STATE")
    for proxy in status["proxies"]:
        behind = _behind(proxy, status)
        state = "NACKED" if proxy["nacked"] else ("BEHIND " + ",".join(behind) if behind else "in sync")
        waiting = max(proxy.get("unacked_seconds", {}).values(), default=0.0)
        if waiting >= 1:
            state += f" (a push unACKed for {waiting:.0f}s)"
        versions = [proxy["acked"].get(kind, "-")[:8] for kind in kinds]
        lines.append(f"{proxy['node']:24} {proxy['cluster']:12} " + " ".join(f"{v:8}" for v in versions) + f" {state}")
        for kind, nack in proxy["nacked"].items():
            lines.append(f"    {kind} NACK: {nack['error']}")
            for route in nack["routes"]:
                lines.append(f"      caused by {route['route']} ({route['origin']})")
    lines.extend(_left_out(status))
    return "\n".join(lines)


def _left_out(status: dict[str, Any]) -> list[str]:
    """Routes not in Envoy's config while every other route serves: quarantined by the
    translator (with why), or losing a conflict over the same match."""
    lines = []
    quarantined: dict[str, str] = status.get("quarantined") or {}
    if quarantined:
        lines.append(f"quarantined routes ({len(quarantined)}, left out of the config):")
        lines.extend(f"    {route}: {why}" for route, why in sorted(quarantined.items()))
    conflicts: list[dict[str, str]] = status.get("conflicts") or []
    if conflicts:
        lines.append(f"conflicting routes ({len(conflicts)}, left out of the config):")
        lines.extend(f"    {c['route']} ({c['origin']}): {c['detail']}" for c in conflicts)
    return lines
