"""The detector's Prometheus metrics.

    gatehouse_breaker_tallies_total{outcome}            accepted, unknown_route, stale
    gatehouse_breaker_detector_transitions_total{to}     open, half-open, closed
"""

from __future__ import annotations

from prometheus_client import Counter

TALLIES = Counter(
    "gatehouse_breaker_tallies_total",
    "Tallies (one route, one bucket) received from telemetry, by what became of them",
    ["outcome"],
)
TRANSITIONS = Counter("gatehouse_breaker_detector_transitions_total", "Breaker moves made by the detector", ["to"])
