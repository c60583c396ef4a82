"""``POST /breakers/tallies``: telemetry's counts in, the classification rules out.

Telemetry posts every ~200 ms, with ``Authorization: Bearer <breakers.tallyCredentialFile>``:

    {"rulesVersion": "<last seen or empty>",
     "tallies": [{"route": "shop/orders", "bucket": 1764790000100, "calls": 12, "failures": 7, "slow": 0}]}

``bucket`` is the start (Unix ms) of a ``BUCKET_MS`` bucket of request start times. The
answer carries the counts' fate and, when ``rulesVersion`` differs from the current one,
the rules (route → primary clusters, failOn, slowCallMs) telemetry classifies with:

    {"rulesVersion": "...", "rules": {...}, "accepted": 1, "unknownRoute": 0, "stale": 0}

A bad credential: 401 (nothing read). A malformed body: 400 naming the field and the rule,
and nothing of the batch is counted. A route without a breaker is ignored and counted
(``gatehouse_breaker_tallies_total{outcome="unknown_route"}``): telemetry's rules may be a
flush behind the control plane's.
"""

from __future__ import annotations

import json
from control_plane.errors import RequestError
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from control_plane.breakers.detector import BreakerDetector, Tally
from control_plane.breakers.rules import BreakerRule, classification, rules_version
from servicekit.bearer import BearerCheck

PATH = "/breakers/tallies"
WINDOW_PATH = "/breakers/window"
MAX_TALLIES = 50_000
MAX_COUNT = 10_000_000
_UNAUTHENTICATED = {"error": "a valid tally credential is required (Authorization: Bearer ...)"}


class TallyBodyError(RequestError):
    """A tally batch that is not what telemetry sends; ``str()`` names the field."""


def _count(item: Mapping[str, Any], key: str, where: str, *, low: int, high: int) -> int:
    value = item.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise TallyBodyError(f"{where}.{key}: must be an integer from {low} to {high}")
    return value


def parse_tallies(body: bytes) -> tuple[str, list[Tally]]:
    """(the rules version telemetry has, its tallies); TallyBodyError if malformed."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise TallyBodyError(f"body: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise TallyBodyError("body: must be a JSON object")
    unknown = sorted(set(data) - {"rulesVersion", "tallies"})
    if unknown:
        raise TallyBodyError(f"body: unknown field {unknown[0]!r}")
    version = data.get("rulesVersion", "")
    if not isinstance(version, str) or len(version) > 64:
        raise TallyBodyError("rulesVersion: must be a string of at most 64 characters")
    items = data.get("tallies", [])
    if not isinstance(items, list) or len(items) > MAX_TALLIES:
        raise TallyBodyError(f"tallies: must be a list of at most {MAX_TALLIES} objects")
    tallies = []
    for index, item in enumerate(items):
        where = f"tallies[{index}]"
        if not isinstance(item, dict):
            raise TallyBodyError(f"{where}: must be an object")
        extra = sorted(set(item) - {"route", "bucket", "calls", "failures", "slow"})
        if extra:
            raise TallyBodyError(f"{where}: unknown field {extra[0]!r}")
        route = item.get("route")
        if not isinstance(route, str) or not 0 < len(route) <= 320:
            raise TallyBodyError(f"{where}.route: must be a route id (namespace/name)")
        calls = _count(item, "calls", where, low=1, high=MAX_COUNT)
        tallies.append(
            Tally(
                route=route,
                bucket_ms=_count(item, "bucket", where, low=0, high=2**53),
                calls=calls,
                failures=_count(item, "failures", where, low=0, high=calls),
                slow=_count(item, "slow", where, low=0, high=calls),
            )
        )
    return version, tallies


class TallyEndpoint:
    """The handler, with the rules derived once per snapshot (``rules`` is called per POST)."""

    def __init__(
        self, detector: BreakerDetector, *, credential: str | None, rules: Callable[[], Mapping[str, BreakerRule]]
    ) -> None:
        self._detector = detector
        self._check = BearerCheck(credential) if credential is not None else None
        self._rules = rules
        self._source: Mapping[str, BreakerRule] | None = None
        self._view: dict[str, Any] = {}
        self._version = ""

    def refresh(self) -> None:
        rules = self._rules()
        if rules is not self._source:
            self._source = rules
            self._detector.set_rules(rules)
            self._view = classification(rules)
            self._version = rules_version(self._view)

    async def handle(self, request: web.Request) -> web.Response:
        if self._check is None:
            return web.json_response(
                {"error": "breaker tallies are not configured: set breakers.tallyCredentialFile"}, status=503
            )
        if not self._check.allows(request.headers.get("Authorization")):
            return web.json_response(_UNAUTHENTICATED, status=401)
        try:
            version, tallies = parse_tallies(await request.read())
        except TallyBodyError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        self.refresh()
        result = self._detector.ingest(tallies)
        body: dict[str, Any] = {
            "rulesVersion": self._version,
            "accepted": result.accepted,
            "unknownRoute": result.unknown_route,
            "stale": result.stale,
        }
        if version != self._version:
            body["rules"] = self._view
        return web.json_response(body)

    async def window(self, request: web.Request) -> web.Response:
        """``GET /breakers/window?route=ns/name``: the phase and what the detector counts now."""
        route_id = request.query.get("route", "")
        self.refresh()
        if route_id not in self._view:
            return web.json_response({"error": f"no route with a breaker named {route_id!r}"}, status=404)
        state = self._detector.board.get(route_id)
        counts = self._detector.window(route_id)
        return web.json_response(
            {
                "route": route_id,
                "phase": state.phase.value,
                "pinned": state.pinned,
                "reason": state.reason,
                "counting": "probes" if state.phase.value == "half-open" else "window",
                "calls": counts.calls,
                "failures": counts.failures,
                "slow": counts.slow,
            }
        )

    def routes(self) -> list[web.RouteDef]:
        return [web.post(PATH, self.handle), web.get(WINDOW_PATH, self.window)]
