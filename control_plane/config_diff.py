"""How one proxy's ACKed config differs from the latest snapshot of its node group.

Backs ``gatehouse status --node X --diff``: per xDS type, the resources the proxy lacks,
the ones it still has that the latest drops, and a unified diff (Envoy's JSON as YAML) of
each one whose version differs.
"""

from __future__ import annotations

import difflib
from typing import Any

from control_plane.cache.resource import Resource
from control_plane.cache.snapshot import Snapshot
from control_plane.cache.types import ResourceType
from control_plane.proxy_status import Proxy
from control_plane.render import resource_data, to_yaml

UNKNOWN = "content unknown: ACKed before this control plane instance started (delta resume)"


def node_diff(proxy: Proxy, latest: Snapshot) -> dict[str, dict[str, Any]]:
    """Only types the proxy subscribed to; an empty result means it runs the latest."""
    out: dict[str, dict[str, Any]] = {}
    for kind in ResourceType:
        if kind.short not in proxy.subscribed:
            continue
        have = proxy.resources.get(kind.short, {})
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
    lines = difflib.unified_diff(
        to_yaml(resource_data(old)).splitlines(keepends=True),
        to_yaml(resource_data(new)).splitlines(keepends=True),
        fromfile=f"{name} (acked {old.version})",
        tofile=f"{name} (latest {new.version})",
    )
    return "".join(lines)
