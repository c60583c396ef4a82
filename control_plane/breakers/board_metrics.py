"""The board's Prometheus metrics: every breaker's phase, and every move by anyone.

    gatehouse_breaker_state{route,phase}            1 for the route's current phase, 0 for the other two
    gatehouse_breaker_pinned{route}                 1 while an operator's open/close holds
    gatehouse_breaker_transitions_total{to,actor}   moves of the detector and of operators

The state is read from the board at scrape time (a collector), so a route that loses its
breaker leaves the scrape with it and a route that never moved shows CLOSED; a gauge set
on each move would keep a deleted route's last phase for ever. The detector's own counter
(``gatehouse_breaker_detector_transitions_total``, detector_metrics.py) stays as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import REGISTRY, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from control_plane.breakers.board import BreakerBoard, BreakerState, Phase
from control_plane.breakers.rules import BreakerRule

TRANSITIONS = Counter("gatehouse_breaker_transitions_total", "Route breaker moves, by the phase entered and who moved it", ["to", "actor"])


class BoardCollector(Collector):
    """Reads the board of the running control plane (``watch``); nothing before that."""

    def __init__(self) -> None:
        self._board: BreakerBoard | None = None
        self._rules: Callable[[], Mapping[str, BreakerRule]] = dict

    def watch(self, board: BreakerBoard, rules: Callable[[], Mapping[str, BreakerRule]]) -> None:
        self._board, self._rules = board, rules
        board.subscribe(_count)

    def collect(self) -> Iterator[Any]:
        state = GaugeMetricFamily("gatehouse_breaker_state", "Route breaker phase: 1 for the current one", labels=["route", "phase"])
        pinned = GaugeMetricFamily("gatehouse_breaker_pinned", "1 while an operator's open or close holds the breaker", labels=["route"])
        board = self._board
        if board is not None:
            for route_id in sorted(self._rules()):
                current = board.get(route_id)
                for phase in Phase:
                    state.add_metric([route_id, phase.value], 1.0 if current.phase is phase else 0.0)
                pinned.add_metric([route_id], 1.0 if current.pinned else 0.0)
        yield state
        yield pinned

    def describe(self) -> Iterator[Any]:
        return iter(())  # unchecked: the series come and go with the routes


def _count(_: str, old: BreakerState, new: BreakerState) -> None:
    TRANSITIONS.labels(new.phase.value, new.actor.value).inc()


BOARD = BoardCollector()
REGISTRY.register(BOARD)
