"""The running control plane: sources → model → translator → cache → ADS, plus admin HTTP.

Two paths lead to a new snapshot:

- routes changed: merge every source's last good set, translate (in a worker thread, so
  ADS streams keep being served), rebuild endpoints for the clusters now in use;
- endpoints changed: rebuild only the affected EDS resources on top of the current
  snapshot. No route is translated and CDS/LDS/RDS keep their versions, so only EDS is
  pushed.

No snapshot is published before every source has finished its first sync, so Envoy never
sees routes without their endpoints at start-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import structlog

from control_plane import heap, metrics
from control_plane.cache.snapshot import Snapshot
from control_plane.cache.snapshot_cache import DEFAULT_GROUP, SnapshotCache
from control_plane.config import ControlPlaneConfig, Gateway
from control_plane.debounce import Debouncer
from control_plane.heap import collector_paused
from control_plane.model.conflicts import Conflict, resolve_conflicts
from control_plane.model.route import Route
from control_plane.proxy_status import ProxyStatus
from control_plane.server.ads import SERVICE_NAME as ADS_SERVICE
from control_plane.server.ads import build_server
from control_plane.sources.base import RouteSet
from control_plane.sources.git import GitSettings, GitSource
from control_plane.sources.kubernetes.endpoints import LayeredEndpoints
from control_plane.sources.kubernetes.source import KubernetesSettings, KubernetesSource
from control_plane.sources.static_endpoints import StaticEndpointsSource
from control_plane.translator import ClusterRef, Endpoint, EndpointTable, EndpointTranslator
from control_plane.translator.edge import edge_resources
from control_plane.translator.from_config import gateway_settings, node_group_settings
from control_plane.translator.pipeline import RouteTranslator, Translation
from control_plane.admin_api import admin_routes
from servicekit.admin_http import AdminServer
from servicekit.audit import AuditSink
from servicekit.grpc_serving import GrpcServing
from servicekit.audit_output import AuditChannel

log = structlog.get_logger(component="control_plane")


class _NoEndpoints:
    def endpoints_for(self, ref: ClusterRef) -> tuple[Endpoint, ...]:
        return ()


class ControlPlane:
    def __init__(self, config: ControlPlaneConfig, *, audit: AuditSink | None = None) -> None:
        self.config = config
        self._audit_channel = AuditChannel(config.audit if audit is None else None, config.resolve)
        self.audit = audit or self._audit_channel
        self.cache = SnapshotCache()
        self.status = ProxyStatus(audit=self.audit)
        self._routes = RouteTranslator(gateway_settings(config, config.gateway))
        self._endpoints = EndpointTranslator()
        self._group_edges = {group: edge_resources(settings) for group, settings in node_group_settings(config).items()}
        self._route_sets: dict[str, RouteSet] = {}
        self._static_table: EndpointTable = _NoEndpoints()
        self._translation: Translation | None = None
        self._git = [
            GitSource(
                GitSettings(
                    name=repo.name,
                    repo=config.repo_location(repo.repo),
                    branch=repo.branch,
                    path=repo.path,
                    poll_interval=repo.poll_interval.seconds,
                    fetch_timeout=repo.fetch_timeout.seconds,
                    **({"cache_dir": config.resolve(repo.cache_dir)} if repo.cache_dir else {}),
                ),
                audit=self.audit,
            )
            for repo in config.sources.git
        ]
        static = config.sources.static_endpoints
        self._static = (
            StaticEndpointsSource(config.resolve(static.file), poll_interval=static.poll_interval.seconds)
            if static is not None
            else None
        )
        quiet, max_delay = config.debounce.quiet.seconds, config.debounce.max_delay.seconds
        self._route_debounce = Debouncer(self._rebuild_routes, quiet=quiet, max_delay=max_delay)
        self._endpoint_debounce = Debouncer(self._rebuild_endpoints, quiet=min(quiet, 0.005), max_delay=max_delay)
        kube = config.sources.kubernetes
        self._kube = (
            KubernetesSource(
                KubernetesSettings(
                    kubeconfig=str(config.resolve(kube.kubeconfig)) if kube.kubeconfig else None,
                    namespaces=tuple(kube.namespaces),
                    lease_name=kube.lease_name,
                    lease_duration=kube.lease_duration.seconds,
                    lease_renew=kube.lease_renew.seconds,
                    write_status=kube.write_status,
                    **({"lease_namespace": kube.lease_namespace} if kube.lease_namespace else {}),
                )
            )
            if kube is not None
            else None
        )
        if self._kube is not None:
            self.status.listeners.append(self._kube)
        self.conflicts: list[Conflict] = []
        self._pending_sources = (
            {g.name for g in self._git}
            | ({self._static.name} if self._static else set())
            | ({self._kube.name} if self._kube else set())
        )
        self._tasks: list[asyncio.Task[Any]] = []
        self._started = time.monotonic()

    # -- lifecycle -----------------------------------------------------------------

    async def run(self) -> None:
        await self._audit_channel.start()  # replays a spool left by an earlier run first
        try:
            await self._serve()
        finally:
            await self._audit_channel.stop()

    async def _serve(self) -> None:
        grpc_server = build_server(self.cache, self.status, self.config.xds.address)
        # gRPC health says what /readyz says: NOT_SERVING until the first full sync is published.
        serving = GrpcServing(grpc_server, [ADS_SERVICE], self.readiness, what="xds")
        admin = AdminServer(self.config.admin.address, readiness=self.readiness, routes=admin_routes(self))
        await serving.start()
        await admin.start()
        log.info("control_plane_started", xds=self.config.xds.address, admin=self.config.admin.address)
        try:
            self._tasks = [
                asyncio.create_task(self._route_debounce.run(), name="route-debounce"),
                asyncio.create_task(self._endpoint_debounce.run(), name="endpoint-debounce"),
                *(asyncio.create_task(g.run(self._on_routes), name=f"git:{g.name}") for g in self._git),
                *(asyncio.create_task(self._await_first_sync(g), name=f"git-first:{g.name}") for g in self._git),
            ]
            if self._static is not None:
                self._tasks.append(asyncio.create_task(self._run_static(self._static), name="static-endpoints"))
            if self._kube is not None:
                self._tasks.append(asyncio.create_task(self._run_kubernetes(self._kube), name="kubernetes"))
            await asyncio.gather(*self._tasks)
        finally:
            for task in self._tasks:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*self._tasks, return_exceptions=True)
            await admin.stop()
            await serving.stop(grace=1.0)

    async def _await_first_sync(self, source: GitSource) -> None:
        """A first commit that was rejected still completes the first sync (with no routes)."""
        await source.synced.wait()
        self._source_synced(source.name)

    async def _run_kubernetes(self, source: KubernetesSource) -> None:
        async def first_sync() -> None:
            await source.synced.wait()
            self._source_synced(source.name)

        waiter = asyncio.create_task(first_sync())
        try:
            await source.run(self._on_routes, self._on_kubernetes_endpoints)
        finally:
            waiter.cancel()

    def _on_kubernetes_endpoints(self) -> None:
        if self._translation is not None:
            self._endpoint_debounce.poke()

    async def _run_static(self, source: StaticEndpointsSource) -> None:
        source.poll(self._on_endpoints)
        self._source_synced(source.name)
        await source.run(self._on_endpoints)

    def readiness(self) -> tuple[bool, str]:
        if self._pending_sources:
            return False, "waiting for first sync of: " + ", ".join(sorted(self._pending_sources))
        if self.cache.current("*") is None:
            return False, "no snapshot yet"
        return True, "ready"

    # -- source callbacks ----------------------------------------------------------

    def _on_routes(self, route_set: RouteSet) -> None:
        self._route_sets[route_set.source] = route_set
        self._route_debounce.poke(route_set.seen_at)

    def _on_endpoints(self, table: EndpointTable, seen_at: float) -> None:
        self._static_table = table
        if self._translation is not None:
            self._endpoint_debounce.poke(seen_at)

    @property
    def _table(self) -> EndpointTable:
        if self._kube is None:
            return self._static_table
        return LayeredEndpoints(self._kube.endpoints, self._static_table)

    def _source_synced(self, name: str) -> None:
        if name in self._pending_sources:
            self._pending_sources.discard(name)
            if not self._pending_sources:
                log.info("first_sync_complete", seconds=round(time.monotonic() - self._started, 3))
                self._route_debounce.poke()

    # -- rebuilds ------------------------------------------------------------------

    def _record_conflicts(self, conflicts: list[Conflict]) -> None:
        """Log each conflict once, when it appears; tell the Kubernetes source (route status)."""
        new = {(c.loser.id, str(c.loser.origin)) for c in conflicts} - {(c.loser.id, str(c.loser.origin)) for c in self.conflicts}
        for conflict in conflicts:
            if (conflict.loser.id, str(conflict.loser.origin)) in new:
                log.error("route_conflict", route=conflict.loser.id, origin=str(conflict.loser.origin), detail=conflict.message)
        self.conflicts = conflicts
        if self._kube is not None:
            self._kube.report_conflicts(conflicts)

    async def _rebuild_routes(self, seen_at: float) -> None:
        if self._pending_sources:
            return
        # Every source's last good routes, one model; conflicting claims resolved.
        routes = [route for name in sorted(self._route_sets) for route in self._route_sets[name].routes]
        started = time.monotonic()
        before = self._routes.translated_routes
        # Merging and translating are CPU work over every route: in a worker thread, so
        # ADS streams keep being served (resolving conflicts alone held the loop 100+ ms
        # at 10k routes).
        kept, conflicts, translation = await asyncio.to_thread(self._translate, routes)
        self._record_conflicts(conflicts)
        metrics.TRANSLATIONS.inc()
        metrics.ROUTES_TRANSLATED.inc(self._routes.translated_routes - before)
        endpoints = self._endpoints.translate(translation.cluster_refs, self._table)
        snapshot = Snapshot.build(
            clusters=translation.clusters,
            endpoints=endpoints,
            listeners=translation.listeners,
            routes=translation.routes,
            ratelimits=translation.ratelimits,
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

    def _translate(self, routes: list[Route]) -> tuple[list[Route], list[Conflict], Translation]:
        with collector_paused():
            kept, conflicts = resolve_conflicts(routes)
            return kept, conflicts, self._routes.translate(kept)

    async def _rebuild_endpoints(self, seen_at: float) -> None:
        current = self.cache.current("*")
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
        for group, edge in self._group_edges.items():
            self.cache.set_snapshot(snapshot.with_edge(edge.listeners, edge.secrets), group)
        self.cache.set_snapshot(snapshot, DEFAULT_GROUP)
        metrics.SNAPSHOTS.labels(reason).inc()

    # -- what the admin API shows --------------------------------------------------

    @property
    def git_sources(self) -> list[GitSource]:
        return list(self._git)

    def source_status(self) -> list[dict[str, Any]]:
        return (
            [g.status() for g in self._git]
            + ([self._static.status()] if self._static else [])
            + ([self._kube.status()] if self._kube else [])
        )

    @property
    def quarantined(self) -> dict[str, str]:
        return dict(self._routes.quarantined)
