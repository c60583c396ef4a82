"""The part of an ADS stream both protocol variants share: node, wake-ups, send order."""

from __future__ import annotations

import asyncio
import itertools
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from typing import Any

import structlog
from envoy.config.core.v3 import base_pb2

from control_plane import metrics
from control_plane.cache.types import ResourceType
from control_plane.cache.watcher import ConfigWatcher
from control_plane.proxy_status import Proxy, ProxyStatus
from control_plane.server.subscriptions import Plan, StreamState

log = structlog.get_logger(component="xds")


class AdsStream(ABC):
    protocol = ""

    def __init__(self, cache: ConfigWatcher, status: ProxyStatus, write: Callable[[Any], Any]) -> None:
        self._cache = cache
        self._status = status
        self._write = write
        self._state = StreamState(full_state_for_wildcard=self.protocol == "sotw")
        self._wake = asyncio.Event()
        self._nonces = itertools.count(1)
        self._proxy: Proxy | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._pushed_snapshots: dict[ResourceType, str] = {}

    async def run(self, requests: AsyncIterator[Any]) -> None:
        reader = asyncio.create_task(self._read(requests))
        try:
            while not reader.done():
                waiter = asyncio.create_task(self._wake.wait())
                await asyncio.wait({reader, waiter}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                self._wake.clear()
                await self._push()
            reader.result()
        finally:
            reader.cancel()
            if self._unsubscribe is not None:
                self._unsubscribe()
            if self._proxy is not None:
                self._status.disconnected(self._proxy)

    async def _read(self, requests: AsyncIterator[Any]) -> None:
        async for request in requests:
            if self._proxy is None:
                self._start(request.node)
            kind = ResourceType.from_url(request.type_url)
            if kind is None:
                log.warning("xds_unknown_type", type_url=request.type_url, node=self.node_id)
                continue
            self._handle(kind, request)
            self._wake.set()

    def _start(self, node: base_pb2.Node) -> None:
        group = node.cluster or "*"
        self._proxy = self._status.connected(node.id, group, self.protocol)
        self._unsubscribe = self._cache.subscribe(group, self._wake.set)

    @property
    def node_id(self) -> str:
        return self._proxy.node_id if self._proxy is not None else "?"

    async def _push(self) -> None:
        if self._proxy is None:
            return
        snapshot = self._cache.current(self._proxy.group)
        if snapshot is None:
            return
        for kind in ResourceType:
            state = self._state[kind]
            if state.requested and (state.wildcard or state.names or kind.wildcard):
                self._proxy.subscribed.add(kind.short)
            else:
                self._proxy.subscribed.discard(kind.short)
            plan = self._state.plan(kind, snapshot)
            # Planning may adopt a state without sending (a subscription shrank, a delta
            # resume); show it. The resources map is shared, not copied: readers copy it.
            if state.acked_version:
                self._proxy.acked[kind.short] = state.acked_version
                self._proxy.resources[kind.short] = state.acked
            if plan is None:
                if state.in_sync:
                    # e.g. a refused change reverted: current again without a new push.
                    self._status.caught_up(self._proxy, kind)
                continue
            nonce = str(next(self._nonces))
            self._state.sent(plan, nonce, snapshot, time.monotonic())
            # Before the write: its ACK may be handled while the write awaits.
            self._status.pushed(self._proxy, kind)
            await self._write(self._response(plan, nonce))
            metrics.PUSHES.labels(kind.short).inc()
            if self._pushed_snapshots.get(kind) != snapshot.version:
                self._pushed_snapshots[kind] = snapshot.version
                metrics.CHANGE_TO_PUSH.labels(kind.short).observe(time.monotonic() - snapshot.changed_at)
            log.debug(
                "xds_push",
                node=self.node_id,
                type=kind.short,
                version=plan.version,
                nonce=nonce,
                resources=len(plan.changed),
                resent=len(plan.resent),
                removed=len(plan.removed),
            )

    def _settle(self, kind: ResourceType, nonce: str, error: str) -> None:
        """Apply an ACK or NACK for the response with ``nonce``; stale nonces are ignored."""
        state = self._state[kind]
        inflight = state.inflight
        if inflight is None or inflight.nonce != nonce or self._proxy is None:
            return
        log.debug("xds_nack" if error else "xds_ack", node=self.node_id, type=kind.short, version=inflight.version, nonce=nonce)
        if error:
            accepted = state.acked_snapshot
            state.reject()
            self._status.nacked(self._proxy, kind, inflight.version, error, inflight.snapshot, accepted)
        else:
            state.acknowledge()
            self._status.acked(self._proxy, kind, inflight.version, inflight.sent_at, inflight.snapshot)

    @abstractmethod
    def _handle(self, kind: ResourceType, request: Any) -> None:
        """Update subscriptions and settle ACK/NACK from one request."""

    @abstractmethod
    def _response(self, plan: Plan, nonce: str) -> Any:
        """The wire message for a plan."""




def nack_reason(request: Any) -> str:
    """Why Envoy refused the response a request names; empty for an ACK.

    A populated ``error_detail`` is what makes a request a NACK, with or without a message.
    """
    if not request.HasField("error_detail"):
        return ""
    detail = request.error_detail
    return str(detail.message) or f"rejected without a message (gRPC status {detail.code})"
