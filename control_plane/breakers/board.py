"""The breaker board: the one place that holds each route breaker's phase.

Two kinds of writer move a breaker: the detector (tallies from telemetry's access-log
stream) and an operator (the admin API). Readers are the translator, which turns a phase
into the route's Envoy entries, and the status page and metrics. The board calls its
listeners after every change so that the snapshot is rebuilt at once; a change that does
not change the phase calls nobody.

With several control-plane replicas, each has its own board and a replication
(control_plane/sources/kubernetes/breaker_board.py) makes them agree: it hands every
peer's state to ``adopt``, which takes it when it is newer (``newer``) and calls the
listeners as for a move of our own.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


class Phase(enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


class Actor(enum.Enum):
    DETECTOR = "detector"
    OPERATOR = "operator"


@dataclass(frozen=True, slots=True)
class BreakerState:
    phase: Phase
    since: float
    """Wall-clock time (``time.time()``) of the move into this phase."""
    actor: Actor
    reason: str
    """Why it moved, for the audit event and the status page ("failure rate 62% of 40 calls")."""
    generation: int
    """Counts every move of this route's breaker; the translator names the HALF_OPEN probe
    budget after it, so each HALF_OPEN gets a fresh budget in Envoy."""
    open_until: float | None = None
    """While OPEN: when it moves to HALF_OPEN (the ``Retry-After`` of ``circuit_open``)."""
    pinned: bool = False
    """An operator's ``open`` or ``close`` holds until the operator releases it; the
    detector keeps counting but does not move a pinned breaker."""
    probes_spent: int = 0
    """While HALF_OPEN: probe calls the detector has counted so far (every gateway). Envoy
    rebuilds a route's probe bucket, full, on every route-table update, so the translator
    sizes it at ``halfOpenProbes`` minus these: a push for another route cannot hand out
    the probes again."""


CLOSED = BreakerState(Phase.CLOSED, since=0.0, actor=Actor.DETECTOR, reason="", generation=0)


def newer(a: BreakerState, b: BreakerState) -> bool:
    """``a`` comes after ``b``: the later move (replicas' clocks are NTP-close), then the
    one with more moves, then an arbitrary but fixed order. Every replica orders two states
    the same way, so boards that trade states end on the same one. Time first, not the move
    count: a replica that judged alone through an API-server outage must not win over an
    operator's later move elsewhere just because it moved more often."""
    return _order(a) > _order(b)


def _order(state: BreakerState) -> tuple[float, int, str, str, str, float, bool]:
    open_until = state.open_until if state.open_until is not None else -1.0
    return (state.since, state.generation, state.phase.value, state.actor.value, state.reason, open_until, state.pinned)


Listener = Callable[[str, BreakerState, BreakerState], None]
"""Called with (route id, old state, new state)."""


@dataclass
class BreakerBoard:
    """Phases by route id (``namespace/name``); a route with no entry is CLOSED."""

    clock: Callable[[], float] = time.time
    _states: dict[str, BreakerState] = field(default_factory=dict)
    _listeners: list[Listener] = field(default_factory=list)
    _shared: dict[str, BreakerState] = field(default_factory=dict)
    """The last state the replicas' shared board showed per route (empty without one)."""

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def get(self, route_id: str) -> BreakerState:
        return self._states.get(route_id, CLOSED)

    def states(self) -> Mapping[str, BreakerState]:
        """Every breaker that has ever moved, read-only."""
        return MappingProxyType(self._states)

    def move(
        self,
        route_id: str,
        phase: Phase,
        *,
        actor: Actor,
        reason: str,
        open_for: float | None = None,
        pinned: bool = False,
    ) -> BreakerState:
        """Move a breaker; returns its new state. ``open_for`` (seconds) is required for OPEN."""
        old = self.get(route_id)
        if phase is Phase.OPEN and open_for is None:
            raise ValueError("an OPEN breaker needs open_for, the wait before HALF_OPEN")
        now = self.clock()
        # Only CLOSED → CLOSED is no move: a move to HALF_OPEN is a fresh probe budget, one
        # to OPEN a fresh open_until (an operator's `open 10m` on an open breaker).
        if old.phase is phase and old.pinned == pinned and phase is Phase.CLOSED:
            return old
        new = BreakerState(
            phase=phase,
            since=now,
            actor=actor,
            reason=reason,
            generation=old.generation + 1,
            open_until=now + open_for if phase is Phase.OPEN and open_for is not None else None,
            pinned=pinned,
        )
        self._states[route_id] = new  # kept when CLOSED too: its generation must keep counting
        for listener in self._listeners:
            listener(route_id, old, new)
        return new

    def spend_probes(self, route_id: str, spent: int) -> None:
        """Note probes counted in HALF_OPEN. Not a move: nothing is pushed for it (the next
        push, for whatever reason, carries the smaller budget), no listener is called."""
        old = self._states.get(route_id)
        if old is not None and old.phase is Phase.HALF_OPEN and spent > old.probes_spent:
            self._states[route_id] = dataclasses.replace(old, probes_spent=spent)

    def forget(self, keep: set[str]) -> None:
        """Drop the states of routes that no longer exist (or no longer have a breaker).
        A state the shared board still holds stays: a peer may know the route before this
        replica does, and its phase must hold here once the route arrives."""
        for route_id in [r for r in self._states if r not in keep and r not in self._shared]:
            del self._states[route_id]

    # -- the shared board (several replicas) -------------------------------------------

    def shared(self, route_id: str) -> BreakerState | None:
        return self._shared.get(route_id)

    def adopt(self, route_id: str, state: BreakerState) -> bool:
        """A state the shared board shows: taken, with the listeners called as for a move,
        when it is newer than ours; kept aside either way (see ``forget``)."""
        self._shared[route_id] = state
        old = self.get(route_id)
        if not newer(state, old):
            return False
        self._states[route_id] = state
        for listener in self._listeners:
            listener(route_id, old, state)
        return True

    def unshare(self, route_id: str) -> None:
        """The shared board dropped the route: its breaker is gone, and its state with it,
        so the route starts CLOSED if it ever comes back."""
        self._shared.pop(route_id, None)
        self._states.pop(route_id, None)
