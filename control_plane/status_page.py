"""The admin port's status page: ``GET /`` (one static HTML document) and the route table
it reads, ``GET /status/routes``.

The document carries no data. Its inline script polls ``/status`` and ``/status/routes``
and builds every cell with ``textContent``, so a route's origin (a Git file name), a
quarantine reason or Envoy's NACK message, all text an author of routes controls, is
shown and never parsed as HTML. A Content-Security-Policy that allows only the page's
own script and style (by hash) and fetches to its own origin backs that up.

Route rows say what the Kubernetes source writes on a Route's status (``Accepted``,
``Programmed``, ``ResolvedRefs``, ``Enforced``), for every source, from what the control plane knows:

- ``Accepted``: ``False`` with reason ``Invalid`` (the source or the translator refused
  it: quarantined), ``Unenforceable`` (it asks for protection this gateway cannot
  enforce; the message names the missing setting) or ``Conflict`` (another route claims
  the same match), else ``True``;
- ``Programmed``: ``False``/``Rejected`` while a connected Envoy's current NACK names the
  route, ``False``/``NotServing`` when it is not in the configuration sent, ``True`` once
  every connected Envoy ACKed its group's latest route configuration, else ``Unknown``
  (``Pending``, or ``NoEnvoy`` when no Envoy is connected);
- ``ResolvedRefs``: ``False``/``RefNotPermitted`` when a Service the route names in another
  namespace has no ReferenceGrant (the route is then not served), ``Unknown`` for a route
  refused before its references were looked at, else ``True``;
- ``Enforced``: ``False``/``NotEnforced`` when an accepted route is served without something
  it asks for (``rateLimits`` with ``rateLimitsWithoutLimiter: serveUnlimited``, an
  ``errorRate`` breaker no tally reaches), else ``True`` (``Unknown`` on a route not served).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from aiohttp import web

from control_plane.model.conflicts import Conflict
from control_plane.model.references import Unresolved
from control_plane.model.route import Route
from control_plane.proxy_status import Proxy
from control_plane.status_page_html import SCRIPT, STYLE, document
from control_plane.translator.pipeline import RouteProblem

ENVOY_TYPES = frozenset({"CDS", "EDS", "LDS", "RDS", "SDS"})
"""Types only Envoy asks for; an xDS client that asks for none of them (ratelimit_svc and
ext_authz ask for ``POLICY`` only) is one of the services the control plane feeds."""

DEFAULT_LIMIT = 500
"""Route rows per answer: problems first, so a large table still shows every problem."""
MAX_LIMIT = 2_000


def is_envoy(proxy: Proxy) -> bool:
    kinds = proxy.subscribed or set(proxy.acked)
    return bool(kinds & ENVOY_TYPES)


def _condition(status: str, reason: str, message: str) -> dict[str, str]:
    return {"status": status, "reason": reason, "message": message}


def _nodes(proxies: Iterable[Proxy]) -> str:
    names = sorted({p.node_id for p in proxies})
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def route_rows(
    *,
    model: Sequence[Route],
    problems: Mapping[str, RouteProblem],
    rejected: Mapping[str, str],
    conflicts: Sequence[Conflict],
    proxies: Iterable[Proxy],
    latest_rds: Mapping[str, str],
    unresolved: Sequence[Unresolved] = (),
    limit: int = DEFAULT_LIMIT,
) -> dict[str, Any]:
    """Every route the control plane knows, with its ``Accepted`` and ``Programmed``
    conditions; rows with a problem first, then by id, at most ``limit`` of them.

    ``problems``: routes the translator left out or served without something, by id;
    ``rejected``:
    Kubernetes objects their source refused, by id, with why; ``latest_rds`` is the RDS version each node group should run (``"*"``:
    the default group's, for groups without a snapshot of their own); ``unresolved``:
    routes left out for a reference no ReferenceGrant permits.
    """
    proxies = list(proxies)
    envoys = [p for p in proxies if is_envoy(p)]
    rejecting: dict[str, list[tuple[Proxy, str, str]]] = {}
    for proxy in proxies:
        for kind, nack in proxy.nacked.items():
            for named in nack.routes:
                rejecting.setdefault(named["route"], []).append((proxy, kind, nack.error))
    behind = [p for p in envoys if p.acked.get("RDS") != latest_rds.get(p.group, latest_rds.get("*"))]
    refused_latest = [p for p in behind if "RDS" in p.nacked]
    if not envoys:
        served = _condition("Unknown", "NoEnvoy", "no Envoy is connected")
    elif behind:
        message = f"waiting for {_nodes(behind)} to ACK the latest route configuration"
        if refused_latest:
            message += f"; {_nodes(refused_latest)} refused it and serve the last one they accepted"
        served = _condition("Unknown", "Pending", message)
    else:
        served = _condition("True", "Programmed", f"every connected Envoy ({len(envoys)}) ACKed the route configuration holding it")

    # (problem, id, origin, Accepted, Programmed, ResolvedRefs, Enforced): cheap tuples for every
    # route; the rows' dicts and origin strings only for those shown (10,000 dicts cost 30-190 ms
    # of loop).
    rows: list[tuple[bool, str, Route | None, dict[str, str], dict[str, str], dict[str, str], dict[str, str]]] = []
    valid = _condition("True", "Accepted", "route is valid")
    resolved = _condition("True", "ResolvedRefs", "every Service the route names is permitted")
    enforced = _condition("True", "Enforced", "everything the route asks for is enforced")
    for route in model:
        programmed = served
        refusals = rejecting.get(route.id)
        if refusals:
            proxy, kind, error = refusals[0]
            others = f" (and {len(refusals) - 1} more)" if len(refusals) > 1 else ""
            programmed = _condition("False", "Rejected", f"{proxy.node_id} NACKed {kind}{others}: {error}")
        # A Kubernetes object refused in its latest generation: its last good one is served.
        invalid = rejected.get(route.id) if route.origin.source == "kubernetes" else None
        accepted = _condition("False", "Invalid", invalid) if invalid else valid
        note = problems.get(route.id)
        enforcing = _condition("False", note.reason, note.message) if note is not None and note.served else enforced
        problem = invalid is not None or programmed["status"] == "False" or enforcing is not enforced
        rows.append((problem, route.id, route, accepted, programmed, resolved, enforcing))
    seen = {route.id for route in model}
    not_serving = _condition("False", "NotServing", "this route is not in the configuration sent to Envoy")
    unknown = _condition("Unknown", "NotServing", "not judged: the route is not served")
    for conflict in conflicts:
        rows.append((True, conflict.loser.id, conflict.loser, _condition("False", "Conflict", conflict.message), not_serving,
                     resolved, unknown))
        seen.add(conflict.loser.id)
    for left_out in unresolved:
        route = left_out.route
        invalid = rejected.get(route.id) if route.origin.source == "kubernetes" else None
        accepted = _condition("False", "Invalid", invalid) if invalid else valid
        refused = _condition("False", "RefNotPermitted", left_out.message)
        rows.append((True, route.id, route, accepted, not_serving, refused, unknown))
        seen.add(route.id)
    # The translator refuses routes whose references held; a refused object's were never read.
    unchecked = _condition("Unknown", "Refused", "the route was refused before its references were looked at")
    for route_id, judged in problems.items():
        if route_id not in seen and not judged.served:
            seen.add(route_id)
            rows.append((True, route_id, judged.route, _condition("False", judged.reason, judged.message), not_serving,
                         resolved, unknown))
    for route_id, message in rejected.items():
        if route_id not in seen:
            seen.add(route_id)
            rows.append((True, route_id, None, _condition("False", "Invalid", message), not_serving, unchecked, unknown))
    rows.sort(key=lambda row: (not row[0], row[1]))
    limit = max(0, min(limit, MAX_LIMIT))
    return {
        "total": len(rows),
        "problems": sum(1 for row in rows if row[0]),
        "programmed": served,
        "routes": [
            {
                "route": route_id,
                "origin": str(route.origin) if route is not None else "",
                "accepted": accepted,
                "programmed": programmed,
                "resolvedRefs": refs,
                "enforced": enforcing,
            }
            for _, route_id, route, accepted, programmed, refs, enforcing in rows[:limit]
        ],
    }


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


PAGE = document().encode()
HEADERS = {
    "Content-Type": "text/html; charset=utf-8",
    "Content-Security-Policy": (
        f"default-src 'none'; script-src {_hash(SCRIPT)}; style-src {_hash(STYLE)}; connect-src 'self'; "
        "img-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


async def page(_: web.Request) -> web.Response:
    return web.Response(body=PAGE, headers=HEADERS)
