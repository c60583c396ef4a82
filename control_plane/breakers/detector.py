"""The detector: tallies in, breaker moves out (on the board, which pushes them to Envoy).

Per route it keeps a ``SlidingWindow`` while CLOSED and the probes' outcomes while
HALF_OPEN, and judges them (``machine.py``) after every batch of tallies. OPEN becomes
HALF_OPEN on a timer on the event loop (``call_later``; nothing waits). Every move of the
board, by anyone, starts the route's counts afresh, and a tally counts toward the
current phase only if its bucket began no earlier than ``SKEW_MS`` before that phase did
(by the request's start time), so a straggler logged late never passes for a probe.

A pinned breaker (an operator's ``open`` or ``close``) keeps counting but is not moved.
Every move the detector makes is an audit event ``breaker.transition``, actor ``detector``.

With replicas sharing one board, every replica counts (telemetry posts to each) but only
the one ``may_move`` allows (the Lease holder) judges: the others take its moves from the
shared board, and are ready to judge the moment they hold the Lease. An OPEN timer, or
a verdict, reached where moving is not allowed is looked at again every ``RECHECK_S``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import structlog

from control_plane.breakers import detector_metrics as metrics
from control_plane.breakers.board import Actor, BreakerBoard, BreakerState, Phase
from control_plane.breakers.machine import Verdict, judge_closed, judge_half_open
from control_plane.breakers.rules import BreakerRule
from control_plane.breakers.window import BUCKET_MS, Counts, SlidingWindow
from servicekit.audit import BREAKER_TRANSITION, AuditEvent, AuditSink, LogAuditSink

log = structlog.get_logger(component="breakers")

RECHECK_S = 1.0
"""How often a replica that may not move looks again at an OPEN breaker whose wait is
over, or at a verdict it reached."""

SKEW_MS = 250
"""How far a gateway's clock may run behind the control plane's before its first probes
are taken for stragglers of the earlier phase (gateways run NTP; 250 ms is generous)."""


@dataclass(frozen=True, slots=True)
class Tally:
    route: str
    bucket_ms: int
    calls: int
    failures: int
    slow: int


@dataclass(slots=True)
class IngestResult:
    accepted: int = 0
    unknown_route: int = 0
    stale: int = 0


class Cancel(Protocol):
    def cancel(self) -> None: ...


Scheduler = Callable[[float, Callable[[], None]], Cancel]
"""``(delay seconds, callback) → handle``: ``loop.call_later`` in the service."""


def _loop_scheduler(delay: float, callback: Callable[[], None]) -> Cancel:
    return asyncio.get_running_loop().call_later(delay, callback)


class _RouteCounts:
    __slots__ = ("window", "probes", "phase_start_ms")

    def __init__(self, rule: BreakerRule, phase_start_ms: float) -> None:
        self.window = SlidingWindow(window_ms=rule.window_ms, window_calls=rule.window_calls)
        self.probes = Counts()
        self.phase_start_ms = phase_start_ms


class BreakerDetector:
    def __init__(
        self,
        board: BreakerBoard,
        *,
        audit: AuditSink | None = None,
        clock: Callable[[], float] = time.time,
        schedule: Scheduler = _loop_scheduler,
        may_move: Callable[[], bool] = lambda: True,
    ) -> None:
        self.board = board
        self._audit = audit or LogAuditSink()
        self._clock = clock
        self._schedule = schedule
        self.may_move = may_move
        self._rules: Mapping[str, BreakerRule] = {}
        self._counts: dict[str, _RouteCounts] = {}
        self._timers: dict[str, Cancel] = {}
        self._rechecks: dict[str, Cancel] = {}
        board.subscribe(self._moved)

    # -- inputs ------------------------------------------------------------------------

    def set_rules(self, rules: Mapping[str, BreakerRule]) -> None:
        """The routes with a breaker now; a changed rule starts its route's counts afresh."""
        if rules == self._rules:
            return
        old, self._rules = self._rules, dict(rules)
        for route_id in [r for r in self._counts if self._rules.get(r) != old.get(r)]:
            del self._counts[route_id]
        for route_id in [r for r in self._timers if r not in self._rules]:
            self._timers.pop(route_id).cancel()
        self.board.forget(set(self._rules))
        for route_id, rule in self._rules.items():
            state = self.board.get(route_id)
            if state.phase is Phase.OPEN and route_id not in self._timers:
                self._arm(route_id, state)

    def ingest(self, tallies: Iterable[Tally]) -> IngestResult:
        """Add a batch (from one telemetry flush) and judge every route it touched."""
        result = IngestResult()
        touched: set[str] = set()
        for tally in tallies:
            rule = self._rules.get(tally.route)
            if rule is None:
                result.unknown_route += 1
                continue
            counts = self._route_counts(tally.route, rule)
            if tally.bucket_ms + BUCKET_MS + SKEW_MS <= counts.phase_start_ms:
                result.stale += 1  # began before this phase: not this phase's evidence
                continue
            result.accepted += 1
            touched.add(tally.route)
            phase = self.board.get(tally.route).phase
            if phase is Phase.HALF_OPEN:
                counts.probes.add(tally.calls, tally.failures, tally.slow)
            elif phase is Phase.CLOSED:
                counts.window.add(tally.bucket_ms, tally.calls, tally.failures, tally.slow)
            # OPEN: the primary upstream gets nothing; late entries of the CLOSED phase are dropped.
        metrics.TALLIES.labels("accepted").inc(result.accepted)
        metrics.TALLIES.labels("unknown_route").inc(result.unknown_route)
        metrics.TALLIES.labels("stale").inc(result.stale)
        for route_id in touched:
            # Kept by the board only while HALF_OPEN: the probes the next push must not hand out again.
            self.board.spend_probes(route_id, round(self._counts[route_id].probes.calls))
            self._judge(route_id)
        return result

    def window(self, route_id: str) -> Counts:
        """The route's window now (CLOSED) or its probes (HALF_OPEN), for status and tests."""
        rule = self._rules.get(route_id)
        if rule is None:
            return Counts()
        counts = self._route_counts(route_id, rule)
        if self.board.get(route_id).phase is Phase.HALF_OPEN:
            return counts.probes
        return counts.window.stats(self._clock() * 1000)

    # -- judging and moving ------------------------------------------------------------

    def _route_counts(self, route_id: str, rule: BreakerRule) -> _RouteCounts:
        counts = self._counts.get(route_id)
        if counts is None:
            counts = self._counts[route_id] = _RouteCounts(rule, self.board.get(route_id).since * 1000)
        return counts

    def _judge(self, route_id: str) -> None:
        rule, state = self._rules[route_id], self.board.get(route_id)
        counts = self._counts[route_id]
        verdict: Verdict | None = None
        evidence: Counts | None = None
        if state.phase is Phase.CLOSED:
            window = counts.window.stats(self._clock() * 1000)
            verdict = judge_closed(rule, window)
            evidence = window
        elif state.phase is Phase.HALF_OPEN:
            verdict = judge_half_open(rule, counts.probes)
            evidence = counts.probes
        if verdict is None:
            return
        if state.pinned:
            log.debug("breaker_pinned", route=route_id, phase=state.phase.value, would=verdict.phase.value)
            return
        if not self.may_move():
            # The replica that judges will move it and its move reaches this board (and
            # starts the counts afresh). Until then look again: if that replica is gone,
            # the verdict must not wait for tallies that may never come (spent probes).
            if route_id not in self._rechecks:
                self._rechecks[route_id] = self._schedule(RECHECK_S, lambda: self._rejudge(route_id))
            return
        self._move(route_id, rule, verdict, evidence)

    def _rejudge(self, route_id: str) -> None:
        self._rechecks.pop(route_id, None)
        if route_id in self._rules and route_id in self._counts:
            self._judge(route_id)

    def _move(self, route_id: str, rule: BreakerRule, verdict: Verdict, evidence: Counts | None) -> None:
        old = self.board.get(route_id)
        open_for = rule.wait_in_open_ms / 1000 if verdict.phase is Phase.OPEN else None
        new = self.board.move(route_id, verdict.phase, actor=Actor.DETECTOR, reason=verdict.reason, open_for=open_for)
        if new.generation == old.generation:
            return
        metrics.TRANSITIONS.labels(verdict.phase.value).inc()
        details: dict[str, str | int | float | bool | None] = {
            "from": old.phase.value,
            "to": new.phase.value,
            "generation": new.generation,
            "open_until": new.open_until,
        }
        if evidence is not None:
            details.update(calls=round(evidence.calls, 1), failures=round(evidence.failures, 1), slow=round(evidence.slow, 1))
        self._audit.emit(
            AuditEvent(kind=BREAKER_TRANSITION, actor=Actor.DETECTOR.value, subject=route_id, reason=verdict.reason, details=details)
        )
        log.info("breaker_moved", route=route_id, to=new.phase.value, reason=verdict.reason, generation=new.generation)

    def _moved(self, route_id: str, old: BreakerState, new: BreakerState) -> None:
        """Every move, whoever made it: fresh counts, and the OPEN timer."""
        rule = self._rules.get(route_id)
        timer = self._timers.pop(route_id, None)
        if timer is not None:
            timer.cancel()
        if rule is None:
            self._counts.pop(route_id, None)
            return
        self._counts[route_id] = _RouteCounts(rule, new.since * 1000)
        if new.phase is Phase.OPEN:
            self._arm(route_id, new)

    def _arm(self, route_id: str, state: BreakerState) -> None:
        if state.pinned or state.open_until is None:
            return
        generation = state.generation
        delay = max(0.0, state.open_until - self._clock())
        self._timers[route_id] = self._schedule(delay, lambda: self._wake(route_id, generation))

    def _wake(self, route_id: str, generation: int) -> None:
        self._timers.pop(route_id, None)
        rule, state = self._rules.get(route_id), self.board.get(route_id)
        if rule is None or state.generation != generation or state.phase is not Phase.OPEN or state.pinned:
            return
        if not self.may_move():
            self._timers[route_id] = self._schedule(RECHECK_S, lambda: self._wake(route_id, generation))
            return
        wait = rule.wait_in_open_ms / 1000
        self._move(route_id, rule, Verdict(Phase.HALF_OPEN, f"waited {wait:g}s in open"), None)
