"""Two routes that claim the same requests: one wins, deterministically; the other is told.

Routes conflict when they have the same id (namespace/name) in two sources, or the same
match (path form and text, methods, header conditions) on overlapping hosts (a host-less
route overlaps every host). The winner is, in order: a Git route over a Kubernetes one
(Git is reviewed config), then the oldest object (as Gateway API does), then the smaller
namespace/name. Losers are left out of the config and reported on their own object.

A Git route can claim only the namespaces its source is bound to
(``model/namespace_binding.py``), so when it wins over a Kubernetes Route of the same id
both were written by that namespace's owners, and the reviewed one is served. It is never
silent: the Kubernetes object gets ``Accepted=False`` (``Conflict``, naming the Git file),
and the Git source logs and lists the replacement (``sources/git_feedback.py``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from control_plane.model.route import Route

_SOURCE_RANK = {"git": 0, "file": 0, "kubernetes": 1}


@dataclass(frozen=True)
class Conflict:
    loser: Route
    winner: Route

    @property
    def same_id(self) -> bool:
        return self.loser.id == self.winner.id

    @property
    def message(self) -> str:
        if self.same_id and self.loser.origin.source != self.winner.origin.source:
            return (
                f"{self.winner.id} is also defined by {self.winner.origin}, which wins "
                f"({self.winner.origin.source} over {self.loser.origin.source}); this one is not served"
            )
        return f"conflicts with {self.winner.id} ({self.winner.origin}), which claims the same hosts and match"


def _precedence(route: Route) -> tuple[int, str, str, str]:
    created = route.origin.created or ""
    return (_SOURCE_RANK.get(route.origin.source, 2), created or "~", route.namespace, route.name)


def _match_signature(route: Route) -> tuple[object, ...]:
    match = route.spec.match
    headers = tuple(sorted(h.model_dump_json() for h in match.headers))
    return (match.path, match.path_prefix, match.path_regex, tuple(sorted(match.methods)), headers)


def _hosts(route: Route) -> frozenset[str] | None:
    hosts = frozenset(route.spec.hosts)
    return None if not hosts or "*" in hosts else hosts


def _overlap(a: frozenset[str] | None, b: frozenset[str] | None) -> bool:
    return a is None or b is None or bool(a & b)


def resolve_conflicts(routes: list[Route]) -> tuple[list[Route], list[Conflict]]:
    """Keep every route that wins or conflicts with nobody; list the losers with their winner."""
    conflicts: list[Conflict] = []
    by_id: dict[str, Route] = {}
    for route in sorted(routes, key=_precedence):
        winner = by_id.setdefault(route.id, route)
        if winner is not route:
            conflicts.append(Conflict(route, winner))
    groups: dict[tuple[object, ...], list[Route]] = defaultdict(list)
    for route in by_id.values():
        groups[_match_signature(route)].append(route)
    kept: list[Route] = []
    for group in groups.values():
        accepted: list[Route] = []
        for route in sorted(group, key=_precedence):
            claimed = next((w for w in accepted if _overlap(_hosts(w), _hosts(route))), None)
            if claimed is None:
                accepted.append(route)
            else:
                conflicts.append(Conflict(route, claimed))
        kept.extend(accepted)
    return kept, conflicts
