"""The contract between sources and the pipeline: a source publishes whole, valid sets.

The runtime knows sources only through these protocols: it runs every route source with
``run_routes`` and every endpoint source with ``run_endpoints`` (the Kubernetes source is
both), waits for each one's ``synced`` before it publishes a first snapshot, and tells a
route source that wants to know (``feedback``) what became of its routes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from control_plane.cache.snapshot import Snapshot
from control_plane.cache.types import ResourceType
from control_plane.model.conflicts import Conflict
from control_plane.model.references import ReferenceGrant, Unresolved
from control_plane.model.route import Route
from control_plane.translator.endpoints import Endpoint, EndpointTable
from control_plane.translator.pipeline import RouteProblem
from control_plane.translator.names import ClusterRef


@dataclass(frozen=True)
class RouteSet:
    """Every route one source holds at one revision, and the ReferenceGrants it holds
    (``model/references.py``). A source never publishes part of one."""

    source: str
    revision: str
    routes: tuple[Route, ...]
    seen_at: float = field(default_factory=time.monotonic)
    grants: tuple[ReferenceGrant, ...] = ()


PublishRoutes = Callable[[RouteSet], None]
PublishEndpoints = Callable[[EndpointTable, float], None]
"""The source's whole endpoint table (it may be the same object, changed), and when the change was seen."""


class Source(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def synced(self) -> asyncio.Event:
        """Set once the first full state has been published, or refused (a rejected first
        commit still completes the first sync, with no routes)."""
        ...

    def status(self) -> dict[str, Any]:
        """What an operator needs: revision served, last error."""
        ...


class RouteFeedback(Protocol):
    """What a source hears about its routes after the merge and from Envoy (Route status)."""

    def report_conflicts(self, conflicts: Sequence[Conflict]) -> None:
        """After each merge: which routes lost their claim to another route."""

    def report_problems(self, problems: Sequence[RouteProblem]) -> None:
        """After each translation: every route refused (not served) or served with
        something it asks for not enforced, all at once (a route not listed has none)."""
    def report_unresolved(self, unresolved: Sequence[Unresolved]) -> None:
        """After each merge: which routes are left out for a cross-namespace reference no
        ReferenceGrant permits (``ResolvedRefs=False``)."""

    def acked(self, kind: ResourceType, snapshot: Snapshot) -> None: ...

    def nacked(self, kind: ResourceType, routes: list[Route], error: str) -> None: ...


class RouteSource(Source, Protocol):
    async def run_routes(self, publish: PublishRoutes) -> None:
        """Publish the first valid set, then each later one; runs until cancelled."""

    @property
    def feedback(self) -> RouteFeedback | None:
        """Who reports conflicts, ACKs and NACKs back to the source's objects; None: nobody."""
        ...


class EndpointSource(Source, Protocol):
    async def run_endpoints(self, publish: PublishEndpoints) -> None:
        """Publish the endpoint table, then each change; runs until cancelled."""


class LayeredEndpoints:
    """Endpoint tables in precedence order: the first that knows a service answers for it,
    even with no endpoints (Kubernetes first; the static file for services the cluster
    does not have)."""

    def __init__(self, *tables: EndpointTable) -> None:
        self._tables = tables

    def knows(self, ref: ClusterRef) -> bool:
        return any(table.knows(ref) for table in self._tables)

    def endpoints_for(self, ref: ClusterRef) -> tuple[Endpoint, ...]:
        for table in self._tables[:-1]:
            if table.knows(ref):
                return table.endpoints_for(ref)
        return self._tables[-1].endpoints_for(ref) if self._tables else ()
