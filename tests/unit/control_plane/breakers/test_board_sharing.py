"""The board's side of sharing between replicas: ``adopt`` takes a peer's newer state and
pushes it like a move, ``forget`` keeps what the shared board holds, and a detector that
may not move (not the Lease holder) counts but leaves the moves to the one that may."""

from __future__ import annotations

from control_plane.breakers.board import Actor, BreakerBoard, BreakerState, Phase, newer
from control_plane.breakers.detector import BreakerDetector
from servicekit.audit import MemoryAuditSink
from tests.unit.control_plane.breakers.test_detector import ROUTE, Clock, Timers, calls
from tests.unit.control_plane.breakers.test_window_and_machine import rule


def state(phase: Phase, generation: int, since: float, **fields: object) -> BreakerState:
    open_until = since + 30 if phase is Phase.OPEN else None
    return BreakerState(phase, since, Actor.OPERATOR, "peer", generation, **{"open_until": open_until, **fields})  # type: ignore[arg-type]


def test_newer_orders_by_time_then_moves_then_content() -> None:
    """Time first: a replica that judged alone through an outage (more moves) must not beat
    an operator's later move elsewhere. Equal time and count still order, by content."""
    assert newer(state(Phase.CLOSED, 2, 99.0), state(Phase.OPEN, 7, 10.0))
    assert newer(state(Phase.OPEN, 3, 10.0), state(Phase.CLOSED, 2, 10.0))
    a, b = state(Phase.OPEN, 2, 10.0), state(Phase.HALF_OPEN, 2, 10.0)
    assert newer(a, b) != newer(b, a), "a total order: one of two different states wins"
    assert not newer(a, a)


def test_a_newer_peer_state_is_taken_and_pushed_an_older_one_is_not() -> None:
    board = BreakerBoard()
    moves: list[tuple[str, BreakerState, BreakerState]] = []
    board.subscribe(lambda route, old, new: moves.append((route, old, new)))
    opened = state(Phase.OPEN, 1, 100.0)
    assert board.adopt(ROUTE, opened) is True
    assert board.get(ROUTE) is opened and board.shared(ROUTE) is opened
    assert [(m[0], m[1].phase, m[2]) for m in moves] == [(ROUTE, Phase.CLOSED, opened)]
    mine = board.move(ROUTE, Phase.CLOSED, actor=Actor.OPERATOR, reason="mine", pinned=True)
    assert mine.generation == 2, "a local move counts on from the adopted generation"
    assert board.adopt(ROUTE, opened) is False, "the peer's older state does not undo ours"
    assert board.get(ROUTE) is mine and len(moves) == 2


def test_forget_keeps_a_route_the_shared_board_holds_and_unshare_drops_it() -> None:
    """A peer can know a route before this replica does: its phase must hold once it
    arrives. Once the shared board drops the route, so does this one: a route created
    again later starts CLOSED."""
    board = BreakerBoard()
    opened = state(Phase.OPEN, 3, 100.0)
    board.adopt("shop/new", opened)
    board.move("shop/old", Phase.OPEN, actor=Actor.OPERATOR, reason="x", open_for=10)
    board.forget(keep={ROUTE})
    assert board.get("shop/new") is opened
    assert board.get("shop/old").phase is Phase.CLOSED
    board.unshare("shop/new")
    assert board.get("shop/new").phase is Phase.CLOSED and "shop/new" not in board.states()


def test_a_replica_that_may_not_move_counts_and_takes_the_leaders_move() -> None:
    clock = Clock()
    timers = Timers(clock)
    board = BreakerBoard(clock=clock)
    audit = MemoryAuditSink()
    leading = False
    detector = BreakerDetector(board, audit=audit, clock=clock, schedule=timers, may_move=lambda: leading)
    detector.set_rules({ROUTE: rule()})
    detector.ingest(calls(timers, 10, 6))
    assert board.get(ROUTE).phase is Phase.CLOSED and audit.events == [], "a follower does not move"
    assert detector.window(ROUTE).calls == 10, "but it counts, ready to judge"
    peer = BreakerState(Phase.OPEN, clock.now, Actor.DETECTOR, "failure rate 60%", 1, open_until=clock.now + 5)
    board.adopt(ROUTE, peer)
    assert detector.window(ROUTE).calls == 0, "a peer's move starts the counts afresh, like any move"
    timers.advance(5)
    assert board.get(ROUTE) is peer, "the wait is over, but the leader moves it to HALF_OPEN"
    leading = True
    timers.advance(1)
    assert board.get(ROUTE).phase is Phase.HALF_OPEN and board.get(ROUTE).generation == 2
    assert [e.details["to"] for e in audit.events] == ["half-open"], "looked again a second later, as the new leader"


def test_a_verdict_a_follower_may_not_act_on_is_looked_at_again_until_it_may() -> None:
    """HALF_OPEN probes all counted, then the Lease holder died: no tally may ever come
    again (the budget is spent), so the verdict must not wait for one."""
    clock = Clock()
    timers = Timers(clock)
    board = BreakerBoard(clock=clock)
    leading = False
    detector = BreakerDetector(board, clock=clock, schedule=timers, may_move=lambda: leading)
    detector.set_rules({ROUTE: rule(half_open_probes=2)})
    board.adopt(ROUTE, BreakerState(Phase.HALF_OPEN, clock.now, Actor.DETECTOR, "waited", 2))
    timers.advance(0.2)
    detector.ingest(calls(timers, 2))
    assert board.get(ROUTE).phase is Phase.HALF_OPEN, "the follower counted both probes but may not close it"
    timers.advance(1)
    assert board.get(ROUTE).phase is Phase.HALF_OPEN
    leading = True  # it takes the Lease; no tally arrives any more
    timers.advance(1)
    closed = board.get(ROUTE)
    assert closed.phase is Phase.CLOSED and closed.reason.startswith("2 half-open probes succeeded"), closed
