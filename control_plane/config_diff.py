"""How one proxy's ACKed config differs from the latest snapshot of its node group.

Backs ``gatehouse status --node X --diff``: per xDS type, the resources the proxy lacks,
the ones it still has that the latest drops, and a unified diff (Envoy's JSON as YAML) of
each one whose version differs.

A route configuration holds every route: it is compared entry by entry (per virtual host,
without the ``metadata`` that names the source commit, which every commit changes), so a
one-route change is a one-entry diff, not thousands of lines. Every diff is capped. This
is CPU work on large configs: the admin endpoint runs it in a worker thread.
"""

from __future__ import annotations

import difflib
from typing import Any

from collections import Counter

from control_plane.cache.resource import Resource
from control_plane.cache.snapshot import Snapshot
from control_plane.cache.types import ResourceType
from control_plane.proxy_status import Proxy
from control_plane.render import resource_data, to_yaml

UNKNOWN = "content unknown: ACKed before this control plane instance started (delta resume)"
MAX_LINES = 400
"""Per resource: beyond this, the diff says how many lines it left out."""


def node_diff(proxy: Proxy, latest: Snapshot) -> dict[str, dict[str, Any]]:
    """Only types the proxy subscribed to; an empty result means it runs the latest."""
    out: dict[str, dict[str, Any]] = {}
    # Runs in a worker thread while the stream may change these: copy first (atomic copies).
    subscribed = set(proxy.subscribed)
    held = dict(proxy.resources)
    for kind in ResourceType:
        if kind.short not in subscribed:
            continue
        have = dict(held.get(kind.short, {}))
        want = latest.of(kind)
        added = sorted(set(want) - set(have))
        removed = sorted(set(have) - set(want))
        changed = {
            name: _diff(have[name], want[name], name)
            for name in sorted(set(want) & set(have))
            if have[name].version != want[name].version
        }
        if added or removed or changed:
            out[kind.short] = {"added": added, "removed": removed, "changed": changed}
    return out


def _diff(old: Resource, new: Resource, name: str) -> str:
    if not old.body:
        return UNKNOWN
    if new.type is ResourceType.ROUTE:
        return _capped(_route_entries_diff(resource_data(old), resource_data(new), name))
    return _capped(_unified(resource_data(old), resource_data(new), f"{name} (acked {old.version})", f"{name} (latest {new.version})"))


def _unified(old: Any, new: Any, before: str, after: str) -> list[str]:
    return list(
        difflib.unified_diff(
            to_yaml(old).splitlines(keepends=True), to_yaml(new).splitlines(keepends=True), fromfile=before, tofile=after
        )
    )


def _entries(config: dict[str, Any]) -> dict[tuple[str, str, int], dict[str, Any]]:
    """(virtual host, route name, n-th entry of that name) → the entry without its metadata."""
    out: dict[tuple[str, str, int], dict[str, Any]] = {}
    for vhost in config.get("virtual_hosts", []):
        seen: Counter[str] = Counter()
        for entry in vhost.get("routes", []):
            name = str(entry.get("name", ""))
            out[(vhost["name"], name, seen[name])] = {k: v for k, v in entry.items() if k != "metadata"}
            seen[name] += 1
    return out


def _route_entries_diff(old: dict[str, Any], new: dict[str, Any], name: str) -> list[str]:
    before, after = _entries(old), _entries(new)
    lines: list[str] = []
    for key in sorted(before.keys() | after.keys()):
        vhost, route, n = key
        label = f"{route or '(unnamed)'} #{n} in virtual host {vhost}"
        if key not in before:
            lines.extend(["+ " + label + "\n", *("+" + line for line in to_yaml(after[key]).splitlines(keepends=True))])
        elif key not in after:
            lines.append("- " + label + " (the latest drops it)\n")
        elif before[key] != after[key]:
            lines.extend(_unified(before[key], after[key], f"{label} (acked)", f"{label} (latest)"))
    if not lines:
        lines.append(f"{name}: only route metadata (the source commit) differs\n")
    return lines


def _capped(lines: list[str]) -> str:
    if len(lines) <= MAX_LINES:
        return "".join(lines)
    return "".join(lines[:MAX_LINES]) + f"... {len(lines) - MAX_LINES} more lines (see GET /config for the whole resource)\n"
