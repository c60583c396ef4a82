"""Which routes a NACK is about.

Envoy's error detail sometimes names a route or a cluster; then that is the answer.
Otherwise the suspects are the routes that changed between the config Envoy last
accepted and the one it refused: a commit usually changes few routes, so this names the
culprit without bisecting.
"""

from __future__ import annotations

from control_plane.cache.snapshot import Snapshot
from control_plane.cache.types import ResourceType
from control_plane.model.route import Route


def attribute_nack(
    kind: ResourceType, error_detail: str, refused: Snapshot, accepted: Snapshot | None
) -> list[Route]:
    by_id = {route.id: route for route in refused.model}
    named = [route for route_id, route in by_id.items() if _mentions(error_detail, route_id)]
    if kind in (ResourceType.CLUSTER, ResourceType.ENDPOINT):
        for name, cluster in refused.clusters.items():
            if _mentions(error_detail, name):
                named.extend(by_id[r] for r in cluster.provenance if r in by_id)
    if named:
        return _unique(named)
    before = {route.id: route for route in accepted.model} if accepted is not None else {}
    return [route for route in refused.model if before.get(route.id) is not route]


def _mentions(text: str, name: str) -> bool:
    index = text.find(name)
    while index != -1:
        end = index + len(name)
        before_ok = index == 0 or not _name_char(text[index - 1])
        after_ok = end == len(text) or not _continues(text, end)
        if before_ok and after_ok:
            return True
        index = text.find(name, index + 1)
    return False


def _name_char(ch: str) -> bool:
    return ch.isalnum() or ch in "-./:"


def _continues(text: str, end: int) -> bool:
    """Whether a name goes on after ``end``: "shop/x:8080" does, "shop/x: bad" does not."""
    ch = text[end]
    if ch == ":":
        return end + 1 < len(text) and text[end + 1].isdigit()
    return _name_char(ch)


def _unique(routes: list[Route]) -> list[Route]:
    seen: set[str] = set()
    out = []
    for route in routes:
        if route.id not in seen:
            seen.add(route.id)
            out.append(route)
    return out
