"""The control plane's own admin endpoints, next to /healthz, /readyz and /metrics.

- ``POST /sync``: fetch every Git source now (a webhook target); ``?wait=0`` returns at once;
- ``GET /status``: sources, quarantined routes, conflicts, routes left out for a missing
  ReferenceGrant (``unresolved``), connected Envoys, ACKed versions, NACKs;
- ``GET /config``: the current resources as Envoy JSON (``?type=RDS``, ``?cluster=<group>``);
- ``GET /status/node?node=<id>[&diff=1]``: one proxy; with ``diff=1``, how its ACKed config
  differs from the latest;
- ``GET /``: the status page (``status_page.py``), which polls ``/status`` and
  ``GET /status/routes[?limit=N]``: every route with its Accepted, Programmed and
  ResolvedRefs conditions.

Who may call what is ``admin_access``: ``POST /sync`` needs the operator credential, the
reads are open or need the read credential as the config says, and a browser's other site
is refused. Route config is not secret but it is internal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

from aiohttp import web

from control_plane.admin_access import AdminAccess
from control_plane.cache.snapshot import Snapshot
from control_plane.cache.snapshot_cache import SnapshotCache
from control_plane.config_diff import node_diff
from control_plane.model.conflicts import Conflict
from control_plane.model.references import Unresolved
from control_plane.proxy_status import ProxyStatus
from control_plane.render import resource_data
from control_plane.sources.git import GitSource
from control_plane.status_page import DEFAULT_LIMIT, page, route_rows
from control_plane.translator.pipeline import RouteProblem


class AdminView(Protocol):
    """What the admin API may see of the running control plane: it reads, and it can
    only ask Git sources to sync sooner."""

    @property
    def cache(self) -> SnapshotCache: ...

    @property
    def status(self) -> ProxyStatus: ...

    @property
    def git_sources(self) -> Sequence[GitSource]: ...

    @property
    def quarantined(self) -> dict[str, str]: ...

    @property
    def problems(self) -> dict[str, RouteProblem]: ...

    @property
    def conflicts(self) -> Sequence[Conflict]: ...

    @property
    def unresolved(self) -> Sequence[Unresolved]: ...

    def readiness(self) -> tuple[bool, str]: ...

    def source_status(self) -> list[dict[str, Any]]: ...


def admin_routes(plane: AdminView, access: AdminAccess) -> list[web.RouteDef]:
    async def sync(request: web.Request) -> web.Response:
        sources = plane.git_sources
        if request.query.get("wait", "1") == "0":
            for source in sources:
                source.trigger()
            return web.json_response({"triggered": [g.name for g in sources]}, status=202)
        results = {}
        for source in sources:
            try:
                results[source.name] = (await source.sync()).as_dict()
            except Exception as exc:  # noqa: BLE001 - reported to the caller; the source keeps polling
                results[source.name] = {"error": str(exc)}
        return web.json_response({"sources": results})

    async def status(_: web.Request) -> web.Response:
        snapshot = plane.cache.current("*")
        ready, reason = plane.readiness()
        body = {
            "ready": ready,
            "reason": reason,
            "snapshot": snapshot_summary(snapshot),
            "groups": group_versions(plane, snapshot),
            "sources": plane.source_status(),
            "quarantined": plane.quarantined,
            "not_enforced": {rid: p.message for rid, p in plane.problems.items() if p.served},
            "conflicts": [
                {"route": c.loser.id, "origin": str(c.loser.origin), "winner": str(c.winner.origin), "detail": c.message}
                for c in plane.conflicts
            ],
            "unresolved": [{"route": u.route.id, "origin": str(u.route.origin), "detail": u.message} for u in plane.unresolved],
            **plane.status.as_dict(),
        }
        return web.json_response(body)

    async def config(request: web.Request) -> web.Response:
        snapshot = plane.cache.current(request.query.get("cluster", "*"))
        if snapshot is None:
            return web.json_response({"error": "no snapshot yet"}, status=503)
        wanted = request.query.get("type", "").upper()
        out = {
            kind.short: [resource_data(r) for r in snapshot.of(kind).values()]
            for kind in snapshot.versions
            if not wanted or kind.short == wanted
        }
        return web.json_response(out)

    async def node_status(request: web.Request) -> web.Response:
        node_id = request.query.get("node", "")
        proxy = plane.status.find(node_id) if node_id else None
        if proxy is None:
            known = sorted({p.node_id for p in plane.status.proxies.values()})
            return web.json_response({"error": f"no connected proxy with node id {node_id!r}", "connected": known}, status=404)
        latest = plane.cache.current(proxy.group) or plane.cache.current("*")
        if latest is None:
            return web.json_response({"error": "no snapshot yet"}, status=503)
        body = {**plane.status.describe(proxy), "latest": {kind.short: version for kind, version in latest.versions.items()}}
        if request.query.get("diff") == "1":
            # Rendering and diffing a large route table is CPU work: off the event loop.
            body["diff"] = await asyncio.to_thread(node_diff, proxy, latest)
        return web.json_response(body)

    async def routes(request: web.Request) -> web.Response:
        try:
            limit = int(request.query.get("limit", DEFAULT_LIMIT))
        except ValueError:
            return web.json_response({"error": "limit must be an integer"}, status=400)
        snapshot = plane.cache.current("*")
        latest = {group: versions.get("RDS", "") for group, versions in group_versions(plane, snapshot).items()}
        body = route_rows(
            model=snapshot.model if snapshot is not None else (),
            problems=plane.problems,
            rejected=kubernetes_rejected(plane.source_status()),
            conflicts=plane.conflicts,
            proxies=plane.status.proxies.values(),
            latest_rds=latest,
            unresolved=plane.unresolved,
            limit=limit,
        )
        return web.json_response(body)

    return [
        web.get("/", page),
        web.post("/sync", access.operator_or_webhook(sync)),
        web.get("/status", status),
        web.get("/status/routes", routes),
        web.get("/status/node", node_status),
        web.get("/config", config),
    ]


def kubernetes_rejected(sources: Sequence[dict[str, Any]]) -> dict[str, str]:
    """Route objects a Kubernetes source refused (``namespace/name`` → why)."""
    out: dict[str, str] = {}
    for source in sources:
        if source.get("kind") == "kubernetes":
            out.update(source.get("rejected") or {})
    return out


def group_versions(plane: AdminView, default: Snapshot | None) -> dict[str, dict[str, str]]:
    """The latest versions per node group, which each proxy is compared against."""
    if default is None:
        return {}
    out = {}
    for group in plane.cache.groups():
        snapshot = plane.cache.current(group) or default
        out[group] = {kind.short: version for kind, version in snapshot.versions.items()}
    return out


def snapshot_summary(snapshot: Snapshot | None) -> dict[str, Any] | None:
    if snapshot is None:
        return None
    return {
        "version": snapshot.version,
        "types": {
            kind.short: {"version": version, "resources": len(snapshot.of(kind))}
            for kind, version in snapshot.versions.items()
        },
        "routes": len(snapshot.model),
    }
