"""Operator control of the route breakers, on the control plane's admin address.

- ``GET /breakers[?route=ns/name]``: every route with a breaker: its phase, since, actor,
  reason, pinned, open_until, generation and what the detector counts now; a read like
  ``/status`` (``admin_access``: open, or the admin read credential);
- ``POST /breakers/{namespace}/{name}/{action}``, ``Authorization: Bearer <breakers.
  operatorCredentialFile>``, optional JSON body ``{"reason": "...", "openFor": "10m"}`` and
  header ``X-Gatehouse-Operator: <who>`` (self-declared, for the audit trail):

  - ``open``: with ``openFor``, OPEN for that long and then the detector's HALF_OPEN
    probes decide as after any open; without it, OPEN and pinned until ``close`` or ``release``;
  - ``close``: CLOSED and pinned (the detector counts but does not open it) until ``release``;
  - ``half-open``: HALF_OPEN now with a fresh probe budget, not pinned: the probes decide;
  - ``release``: unpin and hand the breaker back to the detector; a released OPEN waits
    the route's ``waitInOpen`` before its probes.

Checked in this order, so an unauthenticated caller learns nothing of the routes: 503 when
no operator credential is configured, 401 for a missing or wrong one (audited as
``admin.call``, actor ``unauthenticated``), 400 for an unknown action or a bad body
(naming the field), 404 for a route without ``circuitBreaker.errorRate``. Every move is
an audit event ``breaker.transition``, actor ``operator``; a call that changes nothing
(``close`` of a pinned CLOSED breaker, ``release`` of one not pinned) answers
``"changed": false`` and is not a move.
"""

from __future__ import annotations

import json
from control_plane.errors import RequestError
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web

from control_plane.breakers.board import Actor, BreakerState, Phase
from control_plane.breakers.detector import BreakerDetector
from control_plane.breakers.rules import BreakerRule
from control_plane.config import ControlPlaneConfig
from servicekit.audit import ADMIN_CALL, BREAKER_TRANSITION, AuditEvent, AuditSink, Detail
from servicekit.bearer import BearerCheck, read_bearer_credential
from servicekit.durations import parse_duration_ms

log = structlog.get_logger(component="breakers")

PATH = "/breakers"
ACTION_PATH = "/breakers/{namespace}/{name}/{action}"
OPERATOR_HEADER = "X-Gatehouse-Operator"
"""Who runs the client, self-declared (the same header the ext_authz admin API reads)."""
ACTIONS = ("open", "close", "half-open", "release")
MAX_REASON_CHARS = 256
MAX_OPERATOR_CHARS = 64
MAX_BODY_BYTES = 4096
MAX_OPEN_FOR_MS = 7 * 24 * 3_600_000
"""A week: an operator who means longer pins the breaker (``open`` without ``openFor``)."""
_UNAUTHENTICATED = {"error": "a valid operator credential is required (Authorization: Bearer ...)"}
_NOT_CONFIGURED = {"error": "operator control is not configured: set breakers.operatorCredentialFile"}


class OperatorRequestError(RequestError):
    """A request this API refuses with 400; ``str()`` names the field and the rule."""


@dataclass(frozen=True, slots=True)
class OperatorRequest:
    action: str
    reason: str
    open_for_ms: int | None
    operator: str | None


def _printable(text: str, limit: int) -> bool:
    return len(text) <= limit and all(c.isprintable() for c in text)


def parse_request(action: str, body: bytes, operator: str | None) -> OperatorRequest:
    """The action, its body and the operator header; OperatorRequestError if any is bad."""
    if action not in ACTIONS:
        raise OperatorRequestError(f"action: {action!r} is not one of {', '.join(ACTIONS)}")
    if operator is not None and not (operator and _printable(operator, MAX_OPERATOR_CHARS)):
        raise OperatorRequestError(f"{OPERATOR_HEADER}: at most {MAX_OPERATOR_CHARS} printable characters")
    data: Any = {}
    if body.strip():
        if len(body) > MAX_BODY_BYTES:
            raise OperatorRequestError(f"body: at most {MAX_BODY_BYTES} bytes")
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise OperatorRequestError(f"body: not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise OperatorRequestError("body: must be a JSON object")
    unknown = sorted(set(data) - {"reason", "openFor"})
    if unknown:
        raise OperatorRequestError(f"body: unknown field {unknown[0]!r} (known: openFor, reason)")
    reason = data.get("reason", "")
    if not isinstance(reason, str) or not _printable(reason, MAX_REASON_CHARS):
        raise OperatorRequestError(f"reason: at most {MAX_REASON_CHARS} printable characters")
    open_for_ms: int | None = None
    if "openFor" in data:
        if action != "open":
            raise OperatorRequestError(f"openFor: only for open, not {action}")
        try:
            open_for_ms = int(parse_duration_ms(data["openFor"]))
        except ValueError as exc:
            raise OperatorRequestError(f"openFor: {exc}") from None
        if open_for_ms < 1000 or open_for_ms > MAX_OPEN_FOR_MS:
            raise OperatorRequestError("openFor: from 1s to 168h (to hold it longer, open without openFor: pinned)")
    return OperatorRequest(action=action, reason=reason, open_for_ms=open_for_ms, operator=operator)


def state_view(route_id: str, state: BreakerState, detector: BreakerDetector) -> dict[str, Any]:
    """One breaker as ``GET /breakers`` shows it (snake case, like ``/status``)."""
    counts = detector.window(route_id)
    return {
        "route": route_id,
        "phase": state.phase.value,
        "since": state.since or None,
        "actor": state.actor.value,
        "reason": state.reason,
        "pinned": state.pinned,
        "open_until": state.open_until if not state.pinned else None,
        "generation": state.generation,
        "window": {
            "counting": "probes" if state.phase is Phase.HALF_OPEN else "window",
            "calls": round(counts.calls, 1),
            "failures": round(counts.failures, 1),
            "slow": round(counts.slow, 1),
        },
    }


class OperatorEndpoint:
    """The handlers; ``rules`` is the breaker rules of the current snapshot (called per request)."""

    def __init__(
        self,
        detector: BreakerDetector,
        *,
        credential: str | None,
        rules: Callable[[], Mapping[str, BreakerRule]],
        audit: AuditSink,
    ) -> None:
        self._detector = detector
        self._check = BearerCheck(credential) if credential is not None else None
        self._rules = rules
        self._audit = audit

    def _current_rules(self) -> Mapping[str, BreakerRule]:
        rules = self._rules()
        self._detector.set_rules(rules)  # a no-op unless the snapshot changed them
        return rules

    async def listing(self, request: web.Request) -> web.Response:
        rules = self._current_rules()
        board = self._detector.board
        wanted = request.query.get("route")
        if wanted is not None and wanted not in rules:
            return web.json_response({"error": f"no route with a breaker named {wanted!r}"}, status=404)
        names = [wanted] if wanted is not None else sorted(rules)
        return web.json_response(
            {
                "operator_control": self._check is not None,
                "breakers": [state_view(route_id, board.get(route_id), self._detector) for route_id in names],
            }
        )

    async def act(self, request: web.Request) -> web.Response:
        action = request.match_info["action"]
        route_id = f"{request.match_info['namespace']}/{request.match_info['name']}"
        peer = request.remote or ""
        if self._check is None:
            return web.json_response(_NOT_CONFIGURED, status=503)
        if not self._check.allows(request.headers.get("Authorization")):
            details: dict[str, Detail] = {"method": f"breaker.{action}"[:40], "outcome": "unauthenticated", "peer": peer}
            self._audit.emit(
                AuditEvent(kind=ADMIN_CALL, actor="unauthenticated", reason="missing or wrong operator credential", details=details)
            )
            return web.json_response(_UNAUTHENTICATED, status=401)
        try:
            wanted = parse_request(action, await request.read(), request.headers.get(OPERATOR_HEADER))
        except OperatorRequestError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        rule = self._current_rules().get(route_id)
        if rule is None:
            return web.json_response(
                {"error": f"no route {route_id!r} with a breaker (circuitBreaker.errorRate)"}, status=404
            )
        old, new = self._move(route_id, rule, wanted)
        changed = new.generation != old.generation
        if changed:
            self._audited(route_id, wanted, old, new, peer)
        return web.json_response(
            {"route": route_id, "action": action, "changed": changed, "breaker": state_view(route_id, new, self._detector)}
        )

    def _move(self, route_id: str, rule: BreakerRule, wanted: OperatorRequest) -> tuple[BreakerState, BreakerState]:
        board = self._detector.board
        old = board.get(route_id)
        who = f" by {wanted.operator}" if wanted.operator else ""
        reason = wanted.reason or f"operator {wanted.action}{who}"
        wait = rule.wait_in_open_ms / 1000
        if wanted.action == "open":
            if wanted.open_for_ms is not None:
                new = board.move(route_id, Phase.OPEN, actor=Actor.OPERATOR, reason=reason, open_for=wanted.open_for_ms / 1000)
            else:
                # A pinned OPEN has no timer; open_until (the Retry-After) says waitInOpen.
                new = board.move(route_id, Phase.OPEN, actor=Actor.OPERATOR, reason=reason, open_for=wait, pinned=True)
        elif wanted.action == "close":
            new = board.move(route_id, Phase.CLOSED, actor=Actor.OPERATOR, reason=reason, pinned=True)
        elif wanted.action == "half-open":
            new = board.move(route_id, Phase.HALF_OPEN, actor=Actor.OPERATOR, reason=reason)
        elif not old.pinned:  # release of a breaker the detector holds already
            new = old
        else:
            open_for = wait if old.phase is Phase.OPEN else None
            new = board.move(route_id, old.phase, actor=Actor.OPERATOR, reason=reason, open_for=open_for)
        return old, new

    def _audited(self, route_id: str, wanted: OperatorRequest, old: BreakerState, new: BreakerState, peer: str) -> None:
        details: dict[str, Detail] = {
            "action": wanted.action,
            "from": old.phase.value,
            "to": new.phase.value,
            "pinned": new.pinned,
            "generation": new.generation,
            "open_until": new.open_until if not new.pinned else None,
            "operator": wanted.operator,
            "peer": peer,
        }
        self._audit.emit(
            AuditEvent(kind=BREAKER_TRANSITION, actor=Actor.OPERATOR.value, subject=route_id, reason=new.reason, details=details)
        )
        log.info(
            "breaker_moved", route=route_id, to=new.phase.value, pinned=new.pinned, actor="operator",
            operator=wanted.operator, generation=new.generation,
        )

    def routes(self) -> list[web.RouteDef]:
        return [web.get(PATH, self.listing), web.post(ACTION_PATH, self.act)]


def operator_endpoint(
    config: ControlPlaneConfig, detector: BreakerDetector, rules: Callable[[], Mapping[str, BreakerRule]], audit: AuditSink
) -> OperatorEndpoint:
    """The endpoint as the config says (BearerCredentialError names an unusable file)."""
    path = config.breakers.operator_credential_file
    credential = read_bearer_credential(config.resolve(path)) if path is not None else None
    return OperatorEndpoint(detector, credential=credential, rules=rules, audit=audit)
