"""Connected Envoys, what each has ACKed, and every NACK with the routes behind it.

This is what `gatehouse status` and the admin endpoint show, and where NACKs become a
log line and a metric instead of something only visible in Envoy's own log.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from control_plane import metrics
from control_plane.cache.resource import Resource
from control_plane.cache.snapshot import Snapshot
from control_plane.cache.types import ResourceType
from control_plane.model.route import Route
from control_plane.nack_attribution import attribute_nack
from servicekit.audit import CONFIG_NACKED, INSTANCE, AuditEvent, AuditSink, LogAuditSink

log = structlog.get_logger(component="xds")

MAX_SUSPECTS = 20


@dataclass
class Nack:
    node_id: str
    group: str
    type: str
    version: str
    error: str
    routes: list[dict[str, str]]
    at: float = field(default_factory=time.time)

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node_id,
            "cluster": self.group,
            "type": self.type,
            "version": self.version,
            "error": self.error,
            "routes": self.routes,
            "at": self.at,
        }


@dataclass
class Proxy:
    stream_id: int
    node_id: str
    group: str
    protocol: str
    connected_at: float = field(default_factory=time.time)
    acked: dict[str, str] = field(default_factory=dict)
    nacked: dict[str, Nack] = field(default_factory=dict)
    subscribed: set[str] = field(default_factory=set)
    """Types this client asked for (Envoy: CDS/EDS/LDS/RDS; ratelimit_svc: POLICY)."""
    resources: dict[str, dict[str, Resource]] = field(default_factory=dict)
    """Per type, what it runs: the stream's own ACKed map, shared (for ``status --node X --diff``)."""
    unacked_since: dict[str, float] = field(default_factory=dict)
    """Per type, since when (monotonic) a push has waited for its ACK: refused or slow."""


class ConfigOutcomes(Protocol):
    """Told when Envoy accepts or refuses config: Route status reporting listens here."""

    def acked(self, kind: ResourceType, snapshot: Snapshot) -> None: ...

    def nacked(self, kind: ResourceType, routes: list[Route], error: str) -> None: ...


class ProxyStatus:
    def __init__(self, history: int = 100, *, audit: AuditSink | None = None) -> None:
        self._audit = audit or LogAuditSink()
        self.listeners: list[ConfigOutcomes] = []
        self._ids = itertools.count(1)
        self.proxies: dict[int, Proxy] = {}
        self.nacks: deque[Nack] = deque(maxlen=history)
        for kind in ResourceType:
            metrics.OLDEST_UNACKED_PUSH.labels(kind.short).set_function(functools.partial(self.oldest_unacked, kind.short))

    def oldest_unacked(self, short: str) -> float:
        """Seconds the longest-waiting proxy has had a push of ``short`` neither ACKed nor
        replaced by an ACKed one (0: every proxy is current). Read at scrape time."""
        now = time.monotonic()
        return max((now - p.unacked_since[short] for p in self.proxies.values() if short in p.unacked_since), default=0.0)

    def pushed(self, proxy: Proxy, kind: ResourceType) -> None:
        proxy.unacked_since.setdefault(kind.short, time.monotonic())

    def caught_up(self, proxy: Proxy, kind: ResourceType) -> None:
        """The proxy runs the latest of ``kind`` without a new push (a refused change was
        reverted): nothing is waiting, and an old NACK no longer describes it."""
        proxy.unacked_since.pop(kind.short, None)
        proxy.nacked.pop(kind.short, None)

    def connected(self, node_id: str, group: str, protocol: str) -> Proxy:
        proxy = Proxy(next(self._ids), node_id, group, protocol)
        self.proxies[proxy.stream_id] = proxy
        metrics.CONNECTED_PROXIES.labels(protocol).inc()
        log.info("xds_connected", node=node_id, cluster=group, protocol=protocol)
        return proxy

    def disconnected(self, proxy: Proxy) -> None:
        if self.proxies.pop(proxy.stream_id, None) is not None:
            metrics.CONNECTED_PROXIES.labels(proxy.protocol).dec()
            log.info("xds_disconnected", node=proxy.node_id, cluster=proxy.group)

    def acked(
        self,
        proxy: Proxy,
        kind: ResourceType,
        version: str,
        pushed_at: float,
        snapshot: Snapshot,
    ) -> None:
        proxy.acked[kind.short] = version
        proxy.nacked.pop(kind.short, None)
        proxy.unacked_since.pop(kind.short, None)
        metrics.ACKS.labels(kind.short).inc()
        metrics.PUSH_TO_ACK.labels(kind.short).observe(time.monotonic() - pushed_at)
        for listener in self.listeners:
            listener.acked(kind, snapshot)

    def nacked(
        self,
        proxy: Proxy,
        kind: ResourceType,
        version: str,
        error: str,
        refused: Snapshot,
        accepted: Snapshot | None,
    ) -> Nack:
        routes = attribute_nack(kind, error, refused, accepted)
        if len(routes) > MAX_SUSPECTS:
            # A first config refused as a whole "changed" every route; naming all of them helps nobody.
            log.warning("xds_nack_unattributed", node=proxy.node_id, type=kind.short, suspects=len(routes))
            routes = routes[:MAX_SUSPECTS]
        nack = Nack(
            node_id=proxy.node_id,
            group=proxy.group,
            type=kind.short,
            version=version,
            error=error,
            routes=[{"route": r.id, "origin": str(r.origin)} for r in routes],
        )
        proxy.nacked[kind.short] = nack
        self.nacks.append(nack)
        for listener in self.listeners:
            listener.nacked(kind, routes, error)
        metrics.NACKS.labels(kind.short).inc()
        log.error(
            "xds_nack",
            node=proxy.node_id,
            cluster=proxy.group,
            type=kind.short,
            version=version,
            error=error,
            routes=[f"{r['route']} ({r['origin']})" for r in nack.routes],
        )
        self._audit.emit(AuditEvent(
            kind=CONFIG_NACKED, actor="control_plane", subject=proxy.node_id, reason=error[:500],
            details={"group": proxy.group, "type": kind.short, "version": version, "instance": INSTANCE,
                     "routes": ", ".join(r["route"] for r in nack.routes)[:1000]},
        ))
        return nack

    def find(self, node_id: str) -> Proxy | None:
        """The most recently connected stream of ``node_id``."""
        found = [p for p in self.proxies.values() if p.node_id == node_id]
        return max(found, key=lambda p: p.stream_id) if found else None

    @staticmethod
    def describe(p: Proxy) -> dict[str, Any]:
        now = time.monotonic()
        return {
            "node": p.node_id,
            "cluster": p.group,
            "protocol": p.protocol,
            "connected_at": p.connected_at,
            "acked": dict(p.acked),
            "subscribed": sorted(p.subscribed),
            "nacked": {k: v.as_dict() for k, v in p.nacked.items()},
            "unacked_seconds": {k: round(now - t, 3) for k, t in p.unacked_since.items()},
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "proxies": [self.describe(p) for p in self.proxies.values()],
            "nacks": [n.as_dict() for n in self.nacks],
        }
