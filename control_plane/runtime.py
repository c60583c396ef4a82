"""The running control plane, wired: sources → snapshots (translator) → cache → ADS, plus admin HTTP.

``sources_from_config`` builds the sources and ``gateway_settings`` the translator's view
of the gateway; ``SnapshotPublisher`` turns what the sources publish into a snapshot per
node group. This module only connects them and runs them: every route source through
``run_routes``, every endpoint source through ``run_endpoints``.

No snapshot is published before every source has finished its first sync, so Envoy never
sees routes without their endpoints at start-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import structlog

from control_plane.admin_access import AdminAccess
from control_plane.admin_api import admin_routes
from control_plane.breakers.board import BreakerBoard
from control_plane.breakers import board_metrics
from control_plane.breakers.detector import BreakerDetector
from control_plane.breakers.operator_api import operator_endpoint
from control_plane.breakers.rules import RulesOfSnapshot
from control_plane.breakers.tally_api import TallyEndpoint
from control_plane.cache.snapshot_cache import SnapshotCache
from control_plane.config import ControlPlaneConfig
from control_plane.model.conflicts import Conflict
from control_plane.model.references import Unresolved
from control_plane.model.route import Route
from control_plane.proxy_status import ProxyStatus
from control_plane.server.ads import SERVICE_NAME as ADS_SERVICE
from control_plane.server.ads import build_server
from control_plane.snapshots import SnapshotPublisher
from control_plane.sources.base import Source
from control_plane.sources.from_config import sources_from_config
from control_plane.sources.git import GitSource
from control_plane.translator import RouteTranslator, edge_resources
from control_plane.translator.from_config import gateway_settings, node_group_settings
from control_plane.translator.pipeline import RouteProblem
from servicekit.admin_http import AdminServer
from servicekit.audit import AuditSink
from servicekit.audit_output import AuditChannel
from servicekit.bearer import read_bearer_credential
from servicekit.grpc_serving import GrpcServing

log = structlog.get_logger(component="control_plane")


class ControlPlane:
    def __init__(self, config: ControlPlaneConfig, *, audit: AuditSink | None = None) -> None:
        self.config = config
        self._audit_channel = AuditChannel(config.audit if audit is None else None, config.resolve)
        self.audit = audit or self._audit_channel
        self.cache = SnapshotCache()
        self.status = ProxyStatus(audit=self.audit)
        self._sources = sources_from_config(config, audit=self.audit)
        feedback = [s.feedback for s in self._sources.routes if s.feedback is not None]
        self.status.listeners.extend(feedback)
        self._snapshots = SnapshotPublisher(
            self.cache,
            RouteTranslator(gateway_settings(config, config.gateway)),
            edges={group: edge_resources(settings) for group, settings in node_group_settings(config).items()},
            feedback=feedback,
            quiet=config.debounce.quiet.seconds,
            max_delay=config.debounce.max_delay.seconds,
        )
        self._pending: set[Source] = set(self._sources.every)
        self.breakers = BreakerBoard()
        # A move is a route change: the snapshot is rebuilt and pushed at once, no polling.
        self._snapshots.attach_breakers(self.breakers)
        self.detector = BreakerDetector(self.breakers, audit=self.audit)
        # One view of the snapshot's breaker rules, derived once per snapshot for every reader.
        rules = RulesOfSnapshot(self._current_model)
        credential = config.breakers.tally_credential_file
        self._tallies = TallyEndpoint(
            self.detector,
            credential=read_bearer_credential(config.resolve(credential)) if credential is not None else None,
            rules=rules,
        )
        self._operator = operator_endpoint(config, self.detector, rules, self.audit)
        self._access = AdminAccess.from_config(config, self.audit)
        board_metrics.BOARD.watch(self.breakers, rules)
        cluster = self._sources.kubernetes
        if cluster is not None and cluster.share_breakers(self.breakers, self._breaker_routes(rules)):
            # Several replicas: one board through the cluster, judged by the Lease holder.
            self.detector.may_move = cluster.may_judge_breakers
        self._started = time.monotonic()

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
        routes = [*admin_routes(self, self._access), *self._tallies.routes(), *self._operator.routes()]
        admin = AdminServer(self.config.admin.address, readiness=self.readiness, routes=routes, middlewares=[self._access.middleware])
        await serving.start()
        await admin.start()
        log.info("control_plane_started", xds=self.config.xds.address, admin=self.config.admin.address)
        sources, snapshots = self._sources, self._snapshots
        tasks = [
            asyncio.create_task(snapshots.run(), name="snapshots"),
            *(asyncio.create_task(s.run_routes(snapshots.publish_routes), name=f"routes:{s.name}") for s in sources.routes),
            *(
                asyncio.create_task(s.run_endpoints(snapshots.endpoint_publisher(i)), name=f"endpoints:{s.name}")
                for i, s in enumerate(sources.endpoints)
            ),
            *(asyncio.create_task(self._first_sync(s), name=f"first-sync:{s.name}") for s in sources.every),
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*tasks, return_exceptions=True)
            await admin.stop()
            await serving.stop(grace=1.0)

    async def _first_sync(self, source: Source) -> None:
        await source.synced.wait()
        self._pending.discard(source)
        if not self._pending:
            log.info("first_sync_complete", seconds=round(time.monotonic() - self._started, 3))
            self._snapshots.open()

    def readiness(self) -> tuple[bool, str]:
        if self._pending:
            return False, "waiting for first sync of: " + ", ".join(sorted({s.name for s in self._pending}))
        if self.cache.current("*") is None:
            return False, "no snapshot yet"
        return True, "ready"

    def _breaker_routes(self, rules: RulesOfSnapshot) -> Callable[[], set[str] | None]:
        """The routes with a breaker in the latest snapshot; None before the first one."""
        return lambda: set(rules()) if self.cache.current("*") is not None else None

    def _current_model(self) -> tuple[Route, ...]:
        snapshot = self.cache.current("*")
        return snapshot.model if snapshot is not None else ()

    # -- what the admin API shows (AdminView) ----------------------------------------

    @property
    def git_sources(self) -> list[GitSource]:
        return list(self._sources.git)

    @property
    def conflicts(self) -> list[Conflict]:
        return self._snapshots.conflicts

    @property
    def quarantined(self) -> dict[str, str]:
        return self._snapshots.quarantined

    @property
    def problems(self) -> dict[str, RouteProblem]:
        return self._snapshots.problems

    @property
    def unresolved(self) -> list[Unresolved]:
        return self._snapshots.unresolved

    def source_status(self) -> list[dict[str, Any]]:
        return [source.status() for source in self._sources.every]
