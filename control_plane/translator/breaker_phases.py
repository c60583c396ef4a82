"""A route breaker's phase → what the route's Envoy entries do instead of proxying.

The board (``control_plane/breakers/board.py``) holds each route's phase; the translator
gets a read-only view of it. CLOSED changes nothing. OPEN replaces the route's action so
that no request reaches its backends:

- ``fallback.response``: a direct response with the fallback's status, headers and body;
- ``fallback.circuitOpen`` or no fallback: a direct JSON 503 ``circuit_open`` in the
  gateway's error shape, with ``Retry-After`` (seconds to ``open_until`` at translation,
  rounded up, at least 1);
- ``fallback.backend``: the route's action sent to the fallback backend's cluster.

Every fallback answer carries ``x-gatehouse-breaker: open`` (and a fallback backend's
request too), which the breaker tallies never count as a call.

HALF_OPEN admits ``halfOpenProbes`` requests per Envoy: the route's local_ratelimit
entry (the shield's filter, which it replaces meanwhile) becomes a bucket of that many
tokens that never refills in practice. With a ``response`` or ``backend`` fallback the
other requests get that fallback, as OPEN answers it (breaker_fallback: the bucket marks
them and Envoy matches them again, to a copy of the entry as OPEN); with ``circuitOpen``
or none the bucket denies them, a 503 ``circuit_open`` (local_replies matches them by the
breaker header).
Envoy refills the bucket whenever the route table is pushed again (for any route), so
it is sized at the probes the detector has not yet seen spent
(``BreakerState.probes_spent``); with none left the route's entry is its OPEN fallback,
marked ``half-open``, until the probes' outcome moves it.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from control_plane.breakers.board import BreakerState, Phase
from control_plane.model.route import Route
from control_plane.translator.breaker_fallback import NON_PROBE, REROUTE_FILTER, enable_reroute, non_probe_entry, reroutes, shadow
from control_plane.translator.local_replies import BREAKER_HEADER, CIRCUIT_OPEN_MESSAGE, GatewayError, error_body
from control_plane.translator.shields import LOCAL_RATELIMIT_TYPE, SHIELD_FILTER
from control_plane.translator.names import ClusterRef

CIRCUIT_OPEN = GatewayError("circuit_open", CIRCUIT_OPEN_MESSAGE, 503)
PROBE_REFILL = "31536000s"
"""A year: the probe bucket's fill interval, so the budget is spent once per HALF_OPEN."""
NO_BREAKERS: Mapping[str, BreakerState] = {}


def effective_phase(route: Route, state: BreakerState | None) -> BreakerState | None:
    """The state the translator acts on: only an OPEN breaker of a route with an errorRate."""
    breaker = route.spec.circuit_breaker
    if state is None or breaker is None or breaker.error_rate is None or route.spec.disabled is not None:
        return None
    return None if state.phase is Phase.CLOSED else state


def fallback_refs(route: Route) -> list[ClusterRef]:
    """The fallback backend's cluster, emitted whatever the phase so that it is warm when
    the breaker opens (a cluster added with the route would answer 503 until it warmed)."""
    fallback = route.spec.fallback
    if fallback is None or fallback.backend is None or route.spec.disabled is not None:
        return []
    backend = fallback.backend
    return [ClusterRef(route.backend_namespace(backend.namespace), backend.service, backend.port)]


def retry_after_seconds(state: BreakerState, now: float) -> int:
    if state.open_until is None:
        return 1
    return max(1, math.ceil(state.open_until - now))


def _header(key: str, value: str) -> dict[str, Any]:
    return {"header": {"key": key, "value": value}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}


def _always(runtime_key: str) -> dict[str, Any]:
    return {"runtime_key": runtime_key, "default_value": {"numerator": 100, "denominator": "HUNDRED"}}


def probes_left(route: Route, state: BreakerState) -> int:
    """The probes a HALF_OPEN route may still admit: what the detector has not seen spent.
    Envoy starts the bucket full at every route-table update, so it holds only these."""
    assert route.spec.circuit_breaker is not None and route.spec.circuit_breaker.error_rate is not None
    return max(0, route.spec.circuit_breaker.error_rate.half_open_probes - state.probes_spent)


def probe_budget(route: Route, state: BreakerState) -> dict[str, Any]:
    """The HALF_OPEN probe bucket, named after the generation (a fresh one per HALF_OPEN)."""
    probes = probes_left(route, state)
    assert probes > 0, "a spent budget is answered by the fallback (breaker_entry)"
    return {
        "@type": LOCAL_RATELIMIT_TYPE,
        "stat_prefix": f"breaker_probes_{state.generation}",
        "status": {"code": "ServiceUnavailable"},
        "token_bucket": {"max_tokens": probes, "tokens_per_fill": probes, "fill_interval": PROBE_REFILL},
        "filter_enabled": _always("breaker_probes_enabled"),
        "filter_enforced": _always("breaker_probes_enforced"),
        "response_headers_to_add": [_header(BREAKER_HEADER, NON_PROBE)],
    }


def half_open_fallback(route: Route, state: BreakerState, now: float, entry: dict[str, Any]) -> dict[str, Any] | None:
    """For a HALF_OPEN route with a response or backend fallback: the entry (a copy of
    ``entry``, as CLOSED builds it) that answers a non-probe as OPEN does, to be matched
    ahead of ``entry``; None for any other route or phase."""
    if state.phase is not Phase.HALF_OPEN or not reroutes(route) or probes_left(route, state) == 0:
        return None  # with no probe left, the entry itself is the fallback (breaker_entry)
    fallback = copy.deepcopy(entry)
    # Built as for a spent budget: the OPEN fallback, its marks already ``half-open``.
    assert route.spec.circuit_breaker is not None and route.spec.circuit_breaker.error_rate is not None
    spent = dataclasses.replace(state, probes_spent=route.spec.circuit_breaker.error_rate.half_open_probes)
    breaker_entry(route, spent, now, fallback)
    return non_probe_entry(fallback)


def breaker_entry(route: Route, state: BreakerState, now: float, entry: dict[str, Any]) -> None:
    """Rewrite a route entry (its JSON form, in place) for an OPEN or HALF_OPEN breaker."""
    if state.phase is Phase.HALF_OPEN and probes_left(route, state) > 0:
        per_filter = entry.setdefault("typed_per_filter_config", {})
        if reroutes(route):
            # Non-probes are marked, not denied, and matched again (breaker_fallback).
            per_filter[SHIELD_FILTER] = shadow(probe_budget(route, state))
            per_filter[REROUTE_FILTER] = enable_reroute()
        else:
            per_filter[SHIELD_FILTER] = probe_budget(route, state)
        return
    # OPEN, or HALF_OPEN with every probe spent (awaiting their outcome): the fallback.
    fallback = route.spec.fallback
    marker = _header(BREAKER_HEADER, "open" if state.phase is Phase.OPEN else NON_PROBE)
    if fallback is not None and fallback.backend is not None:
        action = entry["route"]
        action.pop("weighted_clusters", None)
        action["cluster"] = fallback_refs(route)[0].name
        entry["request_headers_to_add"] = [*entry.get("request_headers_to_add", []), marker]
        entry["response_headers_to_add"] = [*entry.get("response_headers_to_add", []), marker]
        return
    entry.pop("route", None)
    entry.pop("request_headers_to_add", None)
    entry.pop("request_headers_to_remove", None)
    if fallback is not None and fallback.response is not None:
        response = fallback.response
        entry["direct_response"] = {"status": response.status, "body": {"inline_string": response.body}}
        headers = [_header(k, v) for k, v in sorted(response.headers.items())]
        headers.append(_header("content-type", response.content_type))
    else:
        entry["direct_response"] = {
            "status": CIRCUIT_OPEN.status,
            "body_format": {"json_format": error_body(CIRCUIT_OPEN), "content_type": "application/json"},
        }
        headers = [_header("retry-after", str(retry_after_seconds(state, now)))]
    entry["response_headers_to_add"] = [*entry.get("response_headers_to_add", []), *headers, marker]
