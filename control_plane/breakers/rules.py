"""What the detector needs of a route's ``circuitBreaker.errorRate``, as a plain value.

``breaker_rules`` takes the routes of the current snapshot; ``classification`` is the part
telemetry needs to sort access-log entries (the answer to every tally POST), and
``rules_version`` names it so telemetry is sent the rules only when they changed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from control_plane.model.route import Route
from control_plane.translator.route_entries import cluster_refs

DEFAULT_SLOW_RATE = 100
"""Resilience4j's default slow-call rate threshold (percent) when only a duration is set."""


@dataclass(frozen=True, slots=True)
class BreakerRule:
    route_id: str
    clusters: tuple[str, ...]
    """The route's primary backends' Envoy clusters: only calls that went to one of them
    count (a fallback backend's answers never do)."""
    fail_on: tuple[str, ...]
    minimum_calls: int
    failure_rate: int
    """Percent."""
    slow_call_ms: int | None
    slow_rate: int | None
    """Percent; None without a slow-call rule."""
    window_ms: int | None
    window_calls: int | None
    wait_in_open_ms: int
    half_open_probes: int


def rule_for(route: Route) -> BreakerRule | None:
    breaker = route.spec.circuit_breaker
    if breaker is None or breaker.error_rate is None or route.spec.disabled is not None:
        return None
    rate = breaker.error_rate
    slow_ms = int(rate.slow_call_duration) if rate.slow_call_duration is not None else None
    return BreakerRule(
        route_id=route.id,
        clusters=tuple(sorted({ref.name for ref in cluster_refs(route)})),
        fail_on=tuple(rate.fail_on),
        minimum_calls=rate.minimum_calls,
        failure_rate=rate.failure_rate_threshold,
        slow_call_ms=slow_ms,
        slow_rate=(rate.slow_call_rate_threshold or DEFAULT_SLOW_RATE) if slow_ms is not None else None,
        window_ms=int(rate.window) if rate.window is not None else None,
        window_calls=rate.window_calls,
        wait_in_open_ms=int(rate.wait_in_open),
        half_open_probes=rate.half_open_probes,
    )


def breaker_rules(routes: Iterable[Route]) -> dict[str, BreakerRule]:
    """Every route with a breaker, by route id."""
    return {rule.route_id: rule for rule in map(rule_for, routes) if rule is not None}


def classification(rules: Mapping[str, BreakerRule]) -> dict[str, dict[str, Any]]:
    """Telemetry's view: route → the clusters that count, what is a failure, what is slow."""
    return {
        route_id: {"clusters": list(rule.clusters), "failOn": list(rule.fail_on), "slowCallMs": rule.slow_call_ms}
        for route_id, rule in sorted(rules.items())
    }


def rules_version(view: Mapping[str, Any]) -> str:
    """Stable across restarts and replicas: a digest of the canonical JSON."""
    return hashlib.sha256(json.dumps(view, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


class RulesOfSnapshot:
    """The rules of the latest published snapshot, derived again only when it changes."""

    def __init__(self, current_model: Callable[[], tuple[Route, ...]]) -> None:
        self._current_model = current_model
        self._model: tuple[Route, ...] | None = None
        self._rules: dict[str, BreakerRule] = {}

    def __call__(self) -> Mapping[str, BreakerRule]:
        model = self._current_model()
        if model is not self._model:
            self._model = model
            self._rules = breaker_rules(model)
        return self._rules
