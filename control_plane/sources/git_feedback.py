"""What a Git source hears after each merge: the Kubernetes Routes its own routes replace.

A Git route and a Kubernetes Route with the same id (or the same match on overlapping
hosts) conflict, and the Git route wins (``model/conflicts.py``). The Kubernetes object is
told on its status (``Accepted=False``, reason ``Conflict``); this is the Git side of the
same report, so the replacement is never silent on either: the source's ``/status`` entry
lists it under ``replaces`` and each new one is logged once (``git_route_replaces``).
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from control_plane.cache.snapshot import Snapshot
from control_plane.cache.types import ResourceType
from control_plane.model.conflicts import Conflict
from control_plane.model.references import Unresolved
from control_plane.model.route import Route
from control_plane.translator.pipeline import RouteProblem

log = structlog.get_logger(component="source.git")

GIT = "git"


class GitFeedback:
    """The ``RouteFeedback`` of one Git source: it keeps the conflicts its routes won
    against another source's; ACKs, NACKs and problems are reported elsewhere."""

    def __init__(self, source: str) -> None:
        self._source = source
        self._won: dict[tuple[str, str], Conflict] = {}
        """(winner's origin, loser's origin) → the conflict."""

    def report_conflicts(self, conflicts: Sequence[Conflict]) -> None:
        fresh = {
            (str(c.winner.origin), str(c.loser.origin)): c
            for c in conflicts
            if c.winner.origin.source == GIT and c.loser.origin.source != GIT
        }
        for key in fresh.keys() - self._won.keys():
            conflict = fresh[key]
            log.warning(
                "git_route_replaces", source=self._source, route=conflict.winner.id, origin=key[0],
                replaced=conflict.loser.id, replaced_origin=key[1],
                detail=f"{conflict.loser.origin.source} route {conflict.loser.id} is not served while this route claims the same "
                       f"{'id' if conflict.same_id else 'hosts and match'}; it is told on its status (Accepted=False, Conflict)",
            )
        self._won = fresh

    def replaces(self) -> list[dict[str, str]]:
        """For ``/status``: each route of this source that replaces another source's."""
        return [
            {"route": c.winner.id, "origin": str(c.winner.origin), "replaces": c.loser.id, "replaced_origin": str(c.loser.origin),
             "reason": "same id" if c.same_id else "same hosts and match"}
            for c in self._won.values()
        ]

    def report_problems(self, problems: Sequence[RouteProblem]) -> None:
        """Refused Git routes are listed in /status by the control plane."""

    def report_unresolved(self, unresolved: Sequence[Unresolved]) -> None:
        """Listed in /status by the control plane."""

    def acked(self, kind: ResourceType, snapshot: Snapshot) -> None:
        """Git routes have no status to write."""

    def nacked(self, kind: ResourceType, routes: list[Route], error: str) -> None:
        """Reported in /status and metrics by the control plane."""
