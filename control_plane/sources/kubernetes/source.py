"""Everything the control plane takes from, and writes back to, a Kubernetes cluster.

Watches: Routes (all namespaces, or a list), ReferenceGrants (all namespaces), Services
and EndpointSlices. Writes: Route status, by the Lease holder only. Route changes go down
the route path; Service and EndpointSlice changes go down the endpoint fast path (EDS
only). Optionally it also syncs API-key Secrets and shares the route breakers' board
(``share_breakers``).
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from kubernetes import client
from kubernetes.client import CoreV1Api  # loaded now, not on the event loop (see leader.py)

from control_plane.breakers.board import BreakerBoard
from control_plane.cache.snapshot import Snapshot
from control_plane.cache.types import ResourceType
from control_plane.model.conflicts import Conflict
from control_plane.model.crd import GROUP, PLURAL, VERSION
from control_plane.model.references import Unresolved
from control_plane.model.route import Route
from control_plane.translator.pipeline import RouteProblem
from control_plane.sources.base import PublishEndpoints, PublishRoutes
from control_plane.config import KubernetesApiKeys
from control_plane.sources.kubernetes.api import api_client
from control_plane.sources.kubernetes.api_key_secrets import SELECTOR, ApiKeySecrets
from control_plane.sources.kubernetes.breaker_board import SharedBreakerBoard
from control_plane.sources.kubernetes.endpoint_trust import EndpointSliceTrust
from control_plane.sources.kubernetes.endpoints import KubernetesEndpoints
from control_plane.sources.kubernetes.leader import LeaderElector
from control_plane.sources.kubernetes.reference_grants import WATCH_NAME, KubernetesReferenceGrants, resolved_refs
from control_plane.sources.kubernetes.route_acks import SharedRouteAcks
from control_plane.sources.kubernetes.shared_config_map import watch_one
from control_plane.sources.kubernetes.routes import SOURCE, KubernetesRouteSource, ObjectState
from control_plane.sources.kubernetes.status import Condition, DesiredStatus, StatusWriter
from control_plane.sources.kubernetes.watch import Changes, ResourceWatch
from servicekit.api_key_store import redis_api_keys

log = structlog.get_logger(component="source.kubernetes")

PENDING = Condition("Programmed", "Unknown", "Pending", "waiting for Envoy to accept the route configuration")
PROGRAMMED = Condition("Programmed", "True", "Programmed", "Envoy accepted the route configuration holding this route")
ENFORCED = Condition("Enforced", "True", "Enforced", "everything the route asks for is enforced")


@dataclass(frozen=True)
class KubernetesSettings:
    kubeconfig: str | None = None
    namespaces: tuple[str, ...] = ()
    lease_namespace: str = field(default_factory=lambda: os.environ.get("POD_NAMESPACE", "default"))
    lease_name: str = "gatehouse-control-plane"
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}")
    lease_duration: float = 15.0
    lease_renew: float = 2.0
    write_status: bool = True
    api_keys: KubernetesApiKeys | None = None
    """Sync API-key Secrets into the key store (``api_key_secrets``)."""
    breaker_board: str | None = None
    """The ConfigMap (in ``lease_namespace``) the replicas share breaker phases through."""
    route_acks: str | None = None
    """The ConfigMap (in ``lease_namespace``) the replicas share their Envoys' ACKs through."""
    endpoint_trust: EndpointSliceTrust = field(default_factory=EndpointSliceTrust)
    """Which EndpointSlices and addresses are used (``endpoint_trust``)."""


class KubernetesSource:
    """A route source (Route objects, whose status it writes) and an endpoint source
    (Services and EndpointSlices): ``run_routes`` and ``run_endpoints`` each start their
    own watches on one API client; ``synced`` is set once every watch has listed."""

    name = SOURCE

    def __init__(self, settings: KubernetesSettings) -> None:
        self._settings = settings
        self.endpoints = KubernetesEndpoints(settings.endpoint_trust)
        self.routes = KubernetesRouteSource(on_state=self._on_state)
        self._watches: list[ResourceWatch] = []
        self._api: client.ApiClient | None = None
        self._leader: LeaderElector | None = None
        self._writer: StatusWriter | None = None
        self._conflicts: dict[str, Conflict] = {}
        self._problems: dict[str, RouteProblem] = {}
        self.reference_grants = KubernetesReferenceGrants()
        self._unresolved: dict[str, Unresolved] = {}
        self._programmed: dict[str, tuple[Route, Condition]] = {}
        self._last_acked = ""
        self.api_keys: ApiKeySecrets | None = None
        self.breaker_board: SharedBreakerBoard | None = None
        self.route_acks: SharedRouteAcks | None = None
        self._board: tuple[BreakerBoard, Callable[[], set[str] | None]] | None = None
        self._route_paths = (
            [f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}" for ns in settings.namespaces]
            if settings.namespaces
            else [f"/apis/{GROUP}/{VERSION}/{PLURAL}"]
        )
        self._unlisted = {*self._route_paths, WATCH_NAME, "services", "endpointslices"}
        self.synced = asyncio.Event()

    @property
    def feedback(self) -> KubernetesSource:
        """Route status: this source writes conflicts, ACKs and NACKs on the objects."""
        return self

    def share_breakers(self, board: BreakerBoard, live_routes: Callable[[], set[str] | None]) -> bool:
        """Before ``run_routes``: share ``board`` with the other replicas, if configured
        (True); the source is then synced only once the shared board has been read."""
        if self._settings.breaker_board is None:
            return False
        self._board = (board, live_routes)
        self._unlisted.add("breaker-board")
        return True

    def may_judge_breakers(self) -> bool:
        """Whether this replica's detector moves breakers: the Lease holder does; so does a
        replica that has not heard from the API server for a lease duration (nobody can
        share a board with it then); without leader election, every replica."""
        leader = self._leader
        return leader is None or leader.leading or leader.isolated

    # -- lifecycle -----------------------------------------------------------------

    def _client(self) -> client.ApiClient:
        if self._api is None:
            self._api = api_client(self._settings.kubeconfig)
        return self._api

    def _first(self, name: str, apply: Callable[[Changes], None]) -> Callable[[Changes], None]:
        def handler(changes: Changes) -> None:
            apply(changes)
            if name in self._unlisted:
                self._unlisted.discard(name)
                if not self._unlisted:
                    self.synced.set()

        return handler

    async def run_routes(self, publish: PublishRoutes) -> None:
        loop = asyncio.get_running_loop()
        api = self._client()
        self.routes.attach(publish)
        self.reference_grants.attach(publish)
        # One watch per namespace when a list is configured; the route source sees their union.
        watches = [
            ResourceWatch(api, path, self._first(path, self.routes.apply), loop, name=f"routes:{path}")
            for path in self._route_paths
        ]
        watches.append(self.reference_grants.watch(api, loop, self._first))
        tasks = []
        if self._settings.write_status:
            self._leader = LeaderElector(
                api,
                namespace=self._settings.lease_namespace,
                name=self._settings.lease_name,
                identity=self._settings.identity,
                duration=max(1, round(self._settings.lease_duration)),
                retry=self._settings.lease_renew,
            )
            self._writer = StatusWriter(api)
            tasks = [
                asyncio.create_task(self._leader.run(), name="lease"),
                asyncio.create_task(self._writer.run(lambda: self._leader is not None and self._leader.leading), name="route-status"),
                asyncio.create_task(self._on_leadership(), name="leadership"),
            ]
            if self._settings.route_acks is not None:
                watch, task = self._route_acks_sync(api, loop, self._settings.route_acks)
                watches.append(watch)
                tasks.append(task)
        if self._settings.api_keys is not None:
            watch, task = self._api_key_sync(api, loop, self._settings.api_keys)
            watches.append(watch)
            tasks.append(task)
        if self._board is not None:  # share_breakers found it configured
            watch, task = self._breaker_board_sync(api, loop, *self._board)
            watches.append(watch)
            tasks.append(task)
        await self._watch(watches, tasks)

    def _breaker_board_sync(
        self,
        api: client.ApiClient,
        loop: asyncio.AbstractEventLoop,
        board: BreakerBoard,
        live_routes: Callable[[], set[str] | None],
    ) -> tuple[ResourceWatch, asyncio.Task[None]]:
        assert self._settings.breaker_board is not None
        shared = self.breaker_board = SharedBreakerBoard(
            CoreV1Api(api), board,
            namespace=self._settings.lease_namespace, name=self._settings.breaker_board,
            live_routes=live_routes, may_prune=self.may_judge_breakers,
        )
        watch = watch_one(api, shared.namespace, shared.name, self._first("breaker-board", shared.apply), loop, what="breaker-board")
        return watch, asyncio.create_task(shared.run(), name="breaker-board")

    def _route_acks_sync(
        self, api: client.ApiClient, loop: asyncio.AbstractEventLoop, name: str
    ) -> tuple[ResourceWatch, asyncio.Task[None]]:
        """The other replicas' Envoys' words on the routes, for the status (route_acks.py)."""
        shared = self.route_acks = SharedRouteAcks(
            CoreV1Api(api), namespace=self._settings.lease_namespace, name=name, identity=self._settings.identity,
            may_prune=lambda: self.leading, on_change=self._refresh_all,
        )
        watch = watch_one(api, shared.namespace, name, shared.apply, loop, what="route-acks")
        return watch, asyncio.create_task(shared.run(), name="route-acks")

    def _api_key_sync(
        self, api: client.ApiClient, loop: asyncio.AbstractEventLoop, settings: KubernetesApiKeys
    ) -> tuple[ResourceWatch, asyncio.Task[None]]:
        """The labelled Secrets' watch and the loop writing them to Redis (the Lease holder's)."""
        store, _ = redis_api_keys(settings.redis_url, prefix=settings.key_prefix, timeout=settings.timeout.seconds)
        self.api_keys = ApiKeySecrets(store, may_write=lambda: self._leader is None or self._leader.leading)
        namespace = settings.namespace or self._settings.lease_namespace
        path = f"/api/v1/namespaces/{namespace}/secrets"
        watch = ResourceWatch(api, path, self.api_keys.apply, loop, name=f"api-keys:{namespace}", label_selector=SELECTOR)
        return watch, asyncio.create_task(self.api_keys.run(), name="api-key-secrets")

    async def run_endpoints(self, publish: PublishEndpoints) -> None:
        loop = asyncio.get_running_loop()
        api = self._client()

        def services(changes: Changes) -> None:
            self.endpoints.apply_services(changes)
            publish(self.endpoints, time.monotonic())

        def slices(changes: Changes) -> None:
            self.endpoints.apply_slices(changes)
            publish(self.endpoints, time.monotonic())

        watches = [
            ResourceWatch(api, "/api/v1/services", self._first("services", services), loop, name="services"),
            ResourceWatch(
                api, "/apis/discovery.k8s.io/v1/endpointslices", self._first("endpointslices", slices), loop, name="endpointslices"
            ),
        ]
        await self._watch(watches, [])

    async def _watch(self, watches: list[ResourceWatch], tasks: list[asyncio.Task[None]]) -> None:
        self._watches.extend(watches)
        for watch in watches:
            # Off the loop: Thread.start() waits until the new thread has been scheduled.
            await asyncio.to_thread(watch.start)
        try:
            await asyncio.gather(*tasks) if tasks else await asyncio.Event().wait()
        finally:
            for watch in watches:
                watch.stop()
            for task in tasks:
                task.cancel()

    async def _on_leadership(self) -> None:
        assert self._leader is not None and self._writer is not None
        while True:
            await self._leader.changed.wait()
            self._leader.changed.clear()
            if self._leader.leading:
                self._writer.rewrite_all()

    @property
    def leading(self) -> bool:
        return self._leader is not None and self._leader.leading

    # -- status ----------------------------------------------------------------------

    def _on_state(self, state: ObjectState | str) -> None:
        key = state if isinstance(state, str) else state.key
        if isinstance(state, str):
            self._programmed.pop(key, None)
            if self.route_acks is not None:
                self.route_acks.say(key, None)
            if self._writer is not None:
                self._writer.forget(key)
            return
        self._refresh(key)

    def _refresh(self, key: str) -> None:
        state = self.routes.state(key)
        if state is None or self._writer is None:
            return
        conflict = self._conflicts.get(key)
        unresolved = self._unresolved.get(key)
        problem = self._problems.get(key)
        if problem is not None and problem.route is not state.serving:
            problem = None  # about an older version of the object
        refused = problem is not None and not problem.served
        if not state.accepted:
            accepted = Condition("Accepted", "False", "Invalid", state.message)
        elif conflict is not None:
            accepted = Condition("Accepted", "False", "Conflict", conflict.message)
        elif problem is not None and refused:
            accepted = Condition("Accepted", "False", problem.reason, problem.message)
        else:
            accepted = Condition("Accepted", "True", "Accepted", "route is valid")
        programmed = PENDING
        record = self._programmed.get(key)
        if conflict is not None or unresolved is not None or state.serving is None or refused:
            programmed = Condition("Programmed", "False", "NotServing", "this route is not in the configuration sent to Envoy")
        else:
            # Every Envoy's word, this replica's and the others' (route_acks): a rejection wins.
            words = [record[1]] if record is not None and record[0] is state.serving else []
            heard = self.route_acks.heard(key, state.serving.origin.revision) if self.route_acks is not None else None
            if heard is not None:
                words.append(_condition(heard[1]))
            programmed = next((w for w in words if w.status == "False"), words[0] if words else PENDING)
        conditions: tuple[Condition, ...] = (accepted, programmed, resolved_refs(unresolved))
        if state.accepted and conflict is None and unresolved is None and not refused:
            conditions += (
                Condition("Enforced", "False", problem.reason, problem.message)
                if problem is not None
                else ENFORCED,
            )
        self._writer.set(key, DesiredStatus(state.generation, conditions))

    def report_problems(self, problems: Sequence[RouteProblem]) -> None:
        """After each translation: routes refused, or served with something not enforced."""
        fresh = {p.route.origin.location: p for p in problems if p.route.origin.source == SOURCE}
        changed = set(fresh) ^ set(self._problems) | {k for k in fresh if self._problems.get(k) != fresh[k]}
        self._problems = fresh
        for key in changed:
            self._refresh(key)

    def _refresh_all(self, keys: set[str]) -> None:
        for key in keys:
            self._refresh(key)

    def report_conflicts(self, conflicts: Sequence[Conflict]) -> None:
        """After each merge: which Kubernetes routes lost to another route."""
        fresh = {c.loser.origin.location: c for c in conflicts if c.loser.origin.source == SOURCE}
        changed = set(fresh) ^ set(self._conflicts) | {k for k in fresh if self._conflicts.get(k) != fresh[k]}
        self._conflicts = fresh
        for key in changed:
            self._refresh(key)

    def report_unresolved(self, unresolved: Sequence[Unresolved]) -> None:
        """After each merge: which Kubernetes routes a missing ReferenceGrant leaves out."""
        fresh = {u.route.origin.location: u for u in unresolved if u.route.origin.source == SOURCE}
        changed = set(fresh) ^ set(self._unresolved) | {k for k in fresh if self._unresolved.get(k) != fresh[k]}
        for key in set(fresh) - set(self._unresolved):
            self._programmed.pop(key, None)  # once granted, Programmed waits for Envoy's next ACK
        self._unresolved = fresh
        for key in changed:
            self._refresh(key)

    def acked(self, kind: ResourceType, snapshot: Snapshot) -> None:
        if kind is not ResourceType.ROUTE or snapshot.version == self._last_acked:
            return
        self._last_acked = snapshot.version  # every Envoy ACKs the same snapshot: look once
        for route in snapshot.model:
            if route.origin.source != SOURCE:
                continue
            key = route.origin.location
            record = self._programmed.get(key)
            if record is None or record[0] is not route or record[1] != PROGRAMMED:
                self._programmed[key] = (route, PROGRAMMED)
                if self.route_acks is not None:
                    self.route_acks.say(key, (route.origin.revision, ""))
                self._refresh(key)

    def nacked(self, kind: ResourceType, routes: list[Route], error: str) -> None:
        for route in routes:
            if route.origin.source != SOURCE:
                continue
            key = route.origin.location
            self._programmed[key] = (route, _condition(error or "rejected"))
            if self.route_acks is not None:
                self.route_acks.say(key, (route.origin.revision, error or "rejected"))
            self._refresh(key)

    def status(self) -> dict[str, Any]:
        return {
            **self.routes.status(),
            "leader": self.leading,
            "identity": self._settings.identity,
            "status_writes": self._writer.writes if self._writer else 0,
            "watches": {w.name: {"synced": w.synced.is_set(), "errors": w.errors, "relists": w.relists} for w in self._watches},
            "conflicts": {k: c.message for k, c in self._conflicts.items()} or None,
            "unresolved": {k: u.message for k, u in self._unresolved.items()} or None,
            "reference_grants": self.reference_grants.status(),
            **({"breaker_board": self.breaker_board.status()} if self.breaker_board is not None else {}),
            **({"route_acks": self.route_acks.status()} if self.route_acks is not None else {}),
        }


def _condition(nack: str) -> Condition:
    """Programmed as Envoy's word makes it: ACKed (no message), or rejected with it."""
    return PROGRAMMED if not nack else Condition("Programmed", "False", "Rejected", f"Envoy rejected it: {nack}")
