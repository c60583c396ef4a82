"""The detector with a fake clock and a fake timer: tallies in, board moves and audit events out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from control_plane.breakers.board import Actor, BreakerBoard, Phase
from control_plane.breakers.detector import BreakerDetector, Tally
from servicekit.audit import BREAKER_TRANSITION, MemoryAuditSink
from tests.unit.control_plane.breakers.test_window_and_machine import rule

ROUTE = "shop/orders"


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Timer:
    due: float
    callback: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


class Timers:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.pending: list[Timer] = []

    def __call__(self, delay: float, callback: Callable[[], None]) -> Timer:
        timer = Timer(self.clock.now + delay, callback)
        self.pending.append(timer)
        return timer

    def advance(self, seconds: float) -> None:
        self.clock.now += seconds
        for timer in [t for t in self.pending if t.due <= self.clock.now and not t.cancelled]:
            self.pending.remove(timer)
            timer.callback()


def setup(**overrides: object) -> tuple[BreakerDetector, BreakerBoard, Timers, MemoryAuditSink]:
    clock = Clock()
    timers = Timers(clock)
    board = BreakerBoard(clock=clock)
    audit = MemoryAuditSink()
    detector = BreakerDetector(board, audit=audit, clock=clock, schedule=timers)
    detector.set_rules({ROUTE: rule(**overrides)})
    return detector, board, timers, audit


def now_bucket(timers: Timers) -> int:
    return int(timers.clock.now * 1000) // 100 * 100


def calls(timers: Timers, count: int, failures: int = 0, slow: int = 0) -> list[Tally]:
    return [Tally(ROUTE, now_bucket(timers), count, failures, slow)]


def test_sixty_percent_failures_open_after_the_minimum_calls_and_it_is_audited() -> None:
    detector, board, timers, audit = setup()
    detector.ingest(calls(timers, 5, 3))
    assert board.get(ROUTE).phase is Phase.CLOSED, "5 calls are below minimumCalls"
    detector.ingest(calls(timers, 5, 3))
    state = board.get(ROUTE)
    assert state.phase is Phase.OPEN and state.actor is Actor.DETECTOR
    assert state.reason == "failure rate 60% of 10 calls (threshold 50%, minimum 10 calls)"
    assert state.open_until == timers.clock.now + 5
    [event] = audit.events
    assert event.kind == BREAKER_TRANSITION and event.actor == "detector" and event.subject == ROUTE
    assert event.details["from"] == "closed" and event.details["to"] == "open" and event.details["failures"] == 6


def test_two_percent_failures_never_open() -> None:
    detector, board, timers, _ = setup()
    for _ in range(50):
        detector.ingest(calls(timers, 49, 1))
        timers.advance(0.2)
    assert board.get(ROUTE).phase is Phase.CLOSED


def test_open_waits_then_half_opens_then_probes_decide() -> None:
    detector, board, timers, audit = setup()
    detector.ingest(calls(timers, 10, 10))
    timers.advance(4.9)
    assert board.get(ROUTE).phase is Phase.OPEN
    timers.advance(0.2)
    assert board.get(ROUTE).phase is Phase.HALF_OPEN
    assert board.get(ROUTE).reason == "waited 5s in open"
    detector.ingest(calls(timers, 2))
    assert board.get(ROUTE).phase is Phase.HALF_OPEN, "2 of 3 probes"
    assert board.get(ROUTE).probes_spent == 2, "the next push gives Envoy one probe, not three"
    detector.ingest(calls(timers, 1))
    assert board.get(ROUTE).phase is Phase.CLOSED
    assert [e.details["to"] for e in audit.events] == ["open", "half-open", "closed"]


def test_a_failed_probe_opens_again_with_a_fresh_wait() -> None:
    detector, board, timers, _ = setup()
    detector.ingest(calls(timers, 10, 10))
    timers.advance(5.1)
    detector.ingest(calls(timers, 1, 1))
    state = board.get(ROUTE)
    assert state.phase is Phase.OPEN and "probe failed" in state.reason
    assert state.open_until == timers.clock.now + 5
    timers.advance(5.1)
    assert board.get(ROUTE).phase is Phase.HALF_OPEN


def test_without_probes_half_open_stays() -> None:
    detector, board, timers, _ = setup()
    detector.ingest(calls(timers, 10, 10))
    timers.advance(5.1)
    timers.advance(3600)
    assert board.get(ROUTE).phase is Phase.HALF_OPEN


def test_stragglers_from_before_the_phase_are_not_probes() -> None:
    detector, board, timers, _ = setup()
    detector.ingest(calls(timers, 10, 10))
    opened_bucket = now_bucket(timers)
    timers.advance(5.1)
    result = detector.ingest([Tally(ROUTE, opened_bucket, 3, 0, 0)])  # logged late, started before OPEN
    assert result.stale == 1 and result.accepted == 0
    assert board.get(ROUTE).phase is Phase.HALF_OPEN


def test_slow_calls_open_with_a_slow_call_rule_only() -> None:
    detector, board, timers, _ = setup()
    detector.ingest(calls(timers, 20, 0, 20))
    assert board.get(ROUTE).phase is Phase.CLOSED
    detector, board, timers, _ = setup(slow_call_ms=200, slow_rate=50)
    detector.ingest(calls(timers, 20, 0, 20))
    assert board.get(ROUTE).phase is Phase.OPEN and board.get(ROUTE).reason.startswith("slow-call rate 100%")


def test_a_pinned_breaker_keeps_counting_but_does_not_move() -> None:
    detector, board, timers, audit = setup()
    board.move(ROUTE, Phase.CLOSED, actor=Actor.OPERATOR, reason="operator close", pinned=True)
    detector.ingest(calls(timers, 20, 20))
    assert board.get(ROUTE).phase is Phase.CLOSED and board.get(ROUTE).pinned
    assert detector.window(ROUTE).failures == 20
    assert audit.events == []
    board.move(ROUTE, Phase.OPEN, actor=Actor.OPERATOR, reason="operator open", open_for=5, pinned=True)
    timers.advance(60)
    assert board.get(ROUTE).phase is Phase.OPEN, "a pinned OPEN has no timer"


def test_an_operator_move_starts_the_counts_afresh_and_an_unpinned_open_still_half_opens() -> None:
    detector, board, timers, _ = setup()
    detector.ingest(calls(timers, 8, 8))
    board.move(ROUTE, Phase.OPEN, actor=Actor.OPERATOR, reason="operator", open_for=2)
    timers.advance(2.1)
    assert board.get(ROUTE).phase is Phase.HALF_OPEN
    detector.ingest(calls(timers, 3))
    assert board.get(ROUTE).phase is Phase.CLOSED
    detector.ingest(calls(timers, 2, 2))
    assert board.get(ROUTE).phase is Phase.CLOSED, "the 8 failures before were forgotten"


def test_unknown_routes_are_ignored_and_counted_and_removed_rules_forget() -> None:
    detector, board, timers, _ = setup()
    result = detector.ingest([Tally("shop/other", now_bucket(timers), 50, 50, 0)])
    assert result.unknown_route == 1 and "shop/other" not in board.states()
    detector.ingest(calls(timers, 10, 10))
    assert board.get(ROUTE).phase is Phase.OPEN
    detector.set_rules({})
    assert ROUTE not in board.states()
    assert all(t.cancelled for t in timers.pending)
