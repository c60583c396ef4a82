"""The circuit breaker with a fake clock: transitions, probes, logs and metrics."""

from __future__ import annotations

from itertools import count

from prometheus_client import REGISTRY
from structlog.testing import capture_logs

from limiter.circuit_breaker import BreakerSettings, CircuitBreaker

_names = count()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(**settings: float) -> tuple[CircuitBreaker, Clock]:
    clock = Clock()
    breaker = CircuitBreaker(BreakerSettings(**settings), name=f"test-{next(_names)}", clock=clock)  # type: ignore[arg-type]
    return breaker, clock


def state_metric(breaker: CircuitBreaker, state: str) -> float | None:
    return REGISTRY.get_sample_value("gatehouse_ratelimit_circuit_state", {"breaker": breaker.name, "state": state})


def fail(breaker: CircuitBreaker, n: int) -> None:
    for _ in range(n):
        assert breaker.acquire()
        breaker.failure()


def test_opens_after_consecutive_failures_and_refuses_calls() -> None:
    breaker, _ = make(consecutive_failures=3)
    fail(breaker, 2)
    assert breaker.state == "closed"
    breaker.acquire()
    breaker.success()  # a success resets the run
    fail(breaker, 2)
    assert breaker.state == "closed"
    fail(breaker, 1)
    assert breaker.state == "open"
    assert not breaker.acquire()
    assert state_metric(breaker, "open") == 1 and state_metric(breaker, "closed") == 0


def test_opens_on_failure_ratio() -> None:
    breaker, _ = make(consecutive_failures=100, failure_ratio=0.5, ratio_window=10)
    for i in range(9):
        breaker.acquire()
        breaker.failure() if i % 2 else breaker.success()
    assert breaker.state == "closed"  # 4 of 9: the window is not full yet
    breaker.acquire()
    breaker.failure()
    assert breaker.state == "open"  # 5 of the last 10


def test_ratio_forgets_old_outcomes() -> None:
    breaker, _ = make(consecutive_failures=100, failure_ratio=0.5, ratio_window=4)
    fail(breaker, 1)
    for _ in range(20):
        breaker.acquire()
        breaker.success()
    for _ in range(3):
        breaker.acquire()
        breaker.failure() if _ == 0 else breaker.success()
    assert breaker.state == "closed"


def test_half_open_after_cooldown_lets_one_probe_through() -> None:
    breaker, clock = make(consecutive_failures=1, cooldown=2.0)
    fail(breaker, 1)
    clock.now += 1.9
    assert not breaker.acquire()
    clock.now += 0.1
    assert breaker.state == "half_open"
    assert breaker.acquire()  # the probe
    assert not breaker.acquire()  # only one at a time
    breaker.success()
    assert breaker.state == "closed"
    assert breaker.acquire() and breaker.acquire()


def test_failed_probe_reopens_for_another_cooldown() -> None:
    breaker, clock = make(consecutive_failures=1, cooldown=1.0)
    fail(breaker, 1)
    clock.now += 1.0
    assert breaker.acquire()
    breaker.failure()
    assert breaker.state == "open"
    clock.now += 0.5
    assert not breaker.acquire()
    clock.now += 0.5
    assert breaker.acquire()


def test_abandoned_probe_frees_its_slot() -> None:
    breaker, clock = make(consecutive_failures=1, cooldown=1.0)
    fail(breaker, 1)
    clock.now += 1.0
    assert breaker.acquire()
    breaker.abandon()
    assert breaker.state == "half_open"
    assert breaker.acquire()


def test_late_failures_while_open_do_not_extend_the_cooldown() -> None:
    breaker, clock = make(consecutive_failures=1, cooldown=1.0)
    fail(breaker, 1)
    clock.now += 0.9
    breaker.failure()  # a call that started before the breaker opened
    clock.now += 0.1
    assert breaker.state == "half_open"


def test_every_transition_is_logged_and_counted() -> None:
    breaker, clock = make(consecutive_failures=2, cooldown=1.0)
    with capture_logs() as logs:
        fail(breaker, 2)
        clock.now += 1.0
        breaker.acquire()
        breaker.failure()
        clock.now += 1.0
        breaker.acquire()
        breaker.success()
    moves = [(e["old"], e["new"]) for e in logs if e["event"] == "ratelimit_circuit"]
    assert moves == [
        ("closed", "open"), ("open", "half_open"), ("half_open", "open"), ("open", "half_open"), ("half_open", "closed"),
    ]
    assert logs[0]["log_level"] == "warning" and "2 consecutive failures" in logs[0]["reason"]

    def transitions(old: str, new: str) -> float | None:
        return REGISTRY.get_sample_value(
            "gatehouse_ratelimit_circuit_transitions_total", {"breaker": breaker.name, "from": old, "to": new}
        )

    assert transitions("closed", "open") == 1
    assert transitions("open", "half_open") == 2
    assert transitions("half_open", "closed") == 1
    assert state_metric(breaker, "closed") == 1
