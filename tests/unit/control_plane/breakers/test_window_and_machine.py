"""The sliding window and the breaker's rules of motion: pure logic, no clock of their own."""

from __future__ import annotations

import pytest

from control_plane.breakers.board import Phase
from control_plane.breakers.machine import judge_closed, judge_half_open
from control_plane.breakers.rules import BreakerRule
from control_plane.breakers.window import MAX_BUCKETS, Counts, SlidingWindow


def rule(**overrides: object) -> BreakerRule:
    fields: dict[str, object] = {
        "route_id": "shop/orders", "clusters": ("shop/orders:8080",), "fail_on": ("5xx",), "minimum_calls": 10,
        "failure_rate": 50, "slow_call_ms": None, "slow_rate": None, "window_ms": 10_000, "window_calls": None,
        "wait_in_open_ms": 5000, "half_open_probes": 3,
    }
    fields.update(overrides)
    return BreakerRule(**fields)  # type: ignore[arg-type]


def test_a_time_window_forgets_buckets_that_began_before_it() -> None:
    window = SlidingWindow(window_ms=1000)
    window.add(0, 10, 10, 0)
    window.add(500, 4, 1, 0)
    window.add(900, 2, 0, 2)
    assert window.stats(1400) == Counts(6, 1, 2)
    assert len(window) == 2
    assert window.stats(1950) == Counts(0, 0, 0)
    assert len(window) == 0


def test_tallies_of_one_bucket_from_several_telemetry_instances_add_up() -> None:
    window = SlidingWindow(window_ms=1000)
    window.add(100, 3, 1, 0)
    window.add(100, 5, 4, 1)
    window.add(0, 1, 0, 0)  # out of order: a slower instance
    assert window.stats(500) == Counts(9, 5, 1)


def test_a_count_window_holds_the_newest_calls_and_scales_its_oldest_bucket() -> None:
    window = SlidingWindow(window_calls=10)
    window.add(0, 100, 100, 0)  # all failing, long ago
    window.add(100, 8, 0, 0)
    window.add(200, 4, 2, 0)
    stats = window.stats(10_000)  # a count window never ages
    assert stats.calls == 10
    assert stats.failures == pytest.approx(2)  # the newest 4 (2 failed) + 6 of the 8 (none failed)
    assert len(window) == 2, "the bucket wholly outside the last 10 calls is dropped"


def test_a_count_window_at_a_trickle_stays_bounded() -> None:
    window = SlidingWindow(window_calls=1_000_000)
    for bucket in range(MAX_BUCKETS + 50):
        window.add(bucket * 100, 1, 1, 0)
    assert len(window) == MAX_BUCKETS
    assert window.stats(0) == Counts(MAX_BUCKETS + 50, MAX_BUCKETS + 50, 0)


def test_closed_needs_the_minimum_calls_before_it_opens() -> None:
    assert judge_closed(rule(), Counts(9, 9, 0)) is None
    verdict = judge_closed(rule(), Counts(10, 6, 0))
    assert verdict is not None and verdict.phase is Phase.OPEN
    assert verdict.reason == "failure rate 60% of 10 calls (threshold 50%, minimum 10 calls)"
    assert judge_closed(rule(), Counts(100, 2, 0)) is None


def test_slow_calls_open_only_with_a_slow_call_rule() -> None:
    slow = Counts(20, 0, 18)
    assert judge_closed(rule(), slow) is None
    verdict = judge_closed(rule(slow_call_ms=200, slow_rate=80), slow)
    assert verdict is not None and verdict.phase is Phase.OPEN
    assert verdict.reason.startswith("slow-call rate 90% of 20 calls over 200ms (threshold 80%")


def test_half_open_closes_after_all_probes_succeed_and_reopens_at_the_first_failure() -> None:
    assert judge_half_open(rule(), Counts(2, 0, 0)) is None
    closed = judge_half_open(rule(), Counts(3, 0, 0))
    assert closed is not None and closed.phase is Phase.CLOSED
    reopened = judge_half_open(rule(), Counts(1, 1, 0))
    assert reopened is not None and reopened.phase is Phase.OPEN
    assert "probe failed" in reopened.reason
    assert judge_half_open(rule(), Counts(3, 0, 3)) is not None and judge_half_open(rule(), Counts(3, 0, 3)).phase is Phase.CLOSED  # type: ignore[union-attr]
    slow_probe = judge_half_open(rule(slow_call_ms=100, slow_rate=50), Counts(1, 0, 1))
    assert slow_probe is not None and slow_probe.phase is Phase.OPEN
