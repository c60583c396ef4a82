"""From what the sources publish to a snapshot per node group in the cache.

Two paths lead to a new snapshot:

- routes changed: merge every source's last good set, leave out the routes whose
  cross-namespace references no ReferenceGrant permits (``model/references.py``), resolve
  conflicts, translate (in a worker thread, so ADS streams keep being served), rebuild
  endpoints for the clusters now in use;
- endpoints changed: rebuild only the affected EDS resources on top of the current
  snapshot. No route is translated and CDS/LDS/RDS keep their versions, so only EDS is
  pushed.

Changes are debounced; nothing is built before ``open()`` (the runtime calls it once every
source has finished its first sync).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import structlog

from control_plane import heap, metrics
from control_plane.breakers.board import BreakerBoard, BreakerState
from control_plane.cache.snapshot import Snapshot
from control_plane.cache.snapshot_cache import DEFAULT_GROUP, SnapshotCache
from control_plane.debounce import Debouncer
from control_plane.heap import collector_paused
from control_plane.model.conflicts import Conflict, resolve_conflicts
from control_plane.model.references import Unresolved, permitted_routes
from control_plane.model.route import Route
from control_plane.sources.base import LayeredEndpoints, PublishEndpoints, RouteFeedback, RouteSet
from control_plane.translator import Edge, EndpointTable, EndpointTranslator, RouteTranslator, Translation
from control_plane.translator.pipeline import UNENFORCEABLE, UNTRANSLATABLE, RouteProblem

NOT_ENFORCED_FIELDS = ("rateLimits", "circuitBreaker.errorRate", "fallThrough")

log = structlog.get_logger(component="control_plane")


class SnapshotPublisher:
    def __init__(
        self,
        cache: SnapshotCache,
        translator: RouteTranslator,
        *,
        edges: Mapping[str, Edge],
        feedback: Sequence[RouteFeedback],
        quiet: float,
        max_delay: float,
        breakers: Callable[[], Mapping[str, BreakerState]] = dict,
    ) -> None:
        self._cache = cache
        self._breakers = breakers
        """The board's states, read on the loop at each route rebuild (the translator's input)."""
        self._routes = translator
        self._endpoints = EndpointTranslator()
        self._edges = edges
        """Each node group's own listener and secret."""
        self._feedback = feedback
        self._route_sets: dict[str, RouteSet] = {}
        self._tables: dict[int, EndpointTable] = {}
        """Each endpoint source's latest table, by its place in precedence order."""
        self._translation: Translation | None = None
        self._open = False
        self.conflicts: list[Conflict] = []
        self._problems: dict[str, RouteProblem] = {}
        self.unresolved: list[Unresolved] = []
        """Routes left out for a reference no grant permits, after the latest merge."""
        self._route_debounce = Debouncer(self._rebuild_routes, quiet=quiet, max_delay=max_delay)
        self._endpoint_debounce = Debouncer(self._rebuild_endpoints, quiet=min(quiet, 0.005), max_delay=max_delay)

    async def run(self) -> None:
        await asyncio.gather(self._route_debounce.run(), self._endpoint_debounce.run())

    def open(self) -> None:
        """Every source has synced: build the first snapshot."""
        self._open = True
        self._route_debounce.poke()

    # -- what the sources publish ----------------------------------------------------

    def publish_routes(self, route_set: RouteSet) -> None:
        self._route_sets[route_set.source] = route_set
        self._route_debounce.poke(route_set.seen_at)

    def endpoint_publisher(self, index: int) -> PublishEndpoints:
        """The publish callback of the endpoint source at ``index`` in precedence order."""

        def publish(table: EndpointTable, seen_at: float) -> None:
            self._tables[index] = table
            if self._translation is not None:
                self._endpoint_debounce.poke(seen_at)

        return publish

    def attach_breakers(self, board: BreakerBoard) -> None:
        """Translate with the board's phases and rebuild on every move."""
        self._breakers = board.states
        board.subscribe(self.breaker_moved)

    def breaker_moved(self, route_id: str, old: BreakerState, new: BreakerState) -> None:
        """A board listener: a phase change is a route change, rebuilt at once (no quiet):
        the board already shows the new phase, Envoy must follow within milliseconds."""
        self._route_debounce.poke_now()

    @property
    def _table(self) -> EndpointTable:
        tables = [self._tables[i] for i in sorted(self._tables)]
        return tables[0] if len(tables) == 1 else LayeredEndpoints(*tables)

    @property
    def quarantined(self) -> dict[str, str]:
        return dict(self._routes.quarantined)

    @property
    def problems(self) -> dict[str, RouteProblem]:
        """Routes refused, untranslatable, or served with something not enforced, by id."""
        return dict(self._routes.problems)

    # -- rebuilds ------------------------------------------------------------------

    def _record_conflicts(self, conflicts: list[Conflict]) -> None:
        """Log each conflict once, when it appears; tell the route sources (route status)."""
        new = {(c.loser.id, str(c.loser.origin)) for c in conflicts} - {(c.loser.id, str(c.loser.origin)) for c in self.conflicts}
        for conflict in conflicts:
            if (conflict.loser.id, str(conflict.loser.origin)) in new:
                log.error("route_conflict", route=conflict.loser.id, origin=str(conflict.loser.origin), detail=conflict.message)
        self.conflicts = conflicts
        for feedback in self._feedback:
            feedback.report_conflicts(conflicts)

    def _record_problems(self, problems: Mapping[str, RouteProblem]) -> None:
        """Log each refused or not-enforced route once, when it appears; tell the route
        sources (route status) and the metrics."""
        for route_id, problem in problems.items():
            before = self._problems.get(route_id)
            if before is not None and before.route is problem.route and before.message == problem.message:
                continue
            event = "route_field_not_enforced" if problem.served else "route_refused"
            (log.warning if problem.served else log.error)(
                event, route=route_id, origin=str(problem.route.origin), reason=problem.reason, detail=problem.message
            )
        self._problems = dict(problems)
        refused = Counter(p.reason for p in problems.values() if not p.served)
        for reason in (UNENFORCEABLE, UNTRANSLATABLE):
            metrics.ROUTES_REFUSED.labels(reason).set(refused.get(reason, 0))
        fields = Counter(
            field
            for p in problems.values()
            if p.served
            for field in {note.split(":", 1)[0] if "falls through" not in note else "fallThrough" for note in p.message.split("; ")}
        )
        for field in NOT_ENFORCED_FIELDS:
            metrics.ROUTES_NOT_ENFORCED.labels(field).set(fields.get(field, 0))
        for feedback in self._feedback:
            feedback.report_problems(list(problems.values()))
    def _record_unresolved(self, unresolved: list[Unresolved]) -> None:
        """Log each route left out for a missing grant once, when it appears; tell the sources."""
        before = {(u.route.id, str(u.route.origin), u.message) for u in self.unresolved}
        for one in unresolved:
            if (one.route.id, str(one.route.origin), one.message) not in before:
                log.warning("route_reference_not_permitted", route=one.route.id, origin=str(one.route.origin), detail=one.message)
        self.unresolved = unresolved
        for feedback in self._feedback:
            feedback.report_unresolved(unresolved)

    async def _rebuild_routes(self, seen_at: float) -> None:
        if not self._open:
            return
        # Every source's last good routes and grants, one model; conflicting claims resolved.
        route_sets = [self._route_sets[name] for name in sorted(self._route_sets)]
        started = time.monotonic()
        before = self._routes.translated_routes
        # Merging and translating are CPU work over every route: in a worker thread, so
        # ADS streams keep being served (resolving conflicts alone held the loop 100+ ms
        # at 10k routes).
        breakers = dict(self._breakers())  # a copy: the board moves on the loop, we read in a thread
        kept, unresolved, conflicts, translation = await asyncio.to_thread(self._translate, route_sets, breakers)
        self._record_unresolved(unresolved)
        self._record_conflicts(conflicts)
        self._record_problems(self._routes.problems)
        metrics.TRANSLATIONS.inc()
        metrics.ROUTES_TRANSLATED.inc(self._routes.translated_routes - before)
        endpoints = self._endpoints.translate(translation.cluster_refs, self._table)
        snapshot = Snapshot.build(
            clusters=translation.clusters,
            endpoints=endpoints,
            listeners=translation.listeners,
            routes=translation.routes,
            policies=translation.policies,
            secrets=translation.secrets,
            model=translation.model,
            changed_at=seen_at,
        )
        self._publish(snapshot, "routes")
        self._translation = translation
        heap.settle()
        log.info(
            "snapshot_published",
            reason="routes",
            version=snapshot.version,
            routes=len(kept),
            clusters=len(translation.clusters),
            translate_ms=round((time.monotonic() - started) * 1000, 1),
        )

    def _translate(
        self, route_sets: list[RouteSet], breakers: Mapping[str, BreakerState]
    ) -> tuple[list[Route], list[Unresolved], list[Conflict], Translation]:
        with collector_paused():
            # References first: a route that cannot be served claims nothing in a conflict.
            permitted, unresolved = permitted_routes(route_sets)
            kept, conflicts = resolve_conflicts(permitted)
            return kept, unresolved, conflicts, self._routes.translate(kept, breakers)

    async def _rebuild_endpoints(self, seen_at: float) -> None:
        current = self._cache.current("*")
        if current is None or self._translation is None:
            return
        endpoints = self._endpoints.translate(self._translation.cluster_refs, self._table)
        snapshot = current.with_endpoints(endpoints, changed_at=seen_at)
        if snapshot.version != current.version:
            self._publish(snapshot, "endpoints")
            log.info("snapshot_published", reason="endpoints", version=snapshot.version)

    def _publish(self, snapshot: Snapshot, reason: str) -> None:
        """Publish for the default group and, with their own listener, for each node group."""
        problems = snapshot.inconsistencies()
        if problems:
            log.error("snapshot_inconsistent", problems=problems[:20], reason=reason)
            return
        for group, edge in self._edges.items():
            self._cache.set_snapshot(snapshot.with_edge(edge.listeners, edge.secrets), group)
        self._cache.set_snapshot(snapshot, DEFAULT_GROUP)
        metrics.SNAPSHOTS.labels(reason).inc()
