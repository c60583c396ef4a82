"""The breaker's rules of motion, as pure functions of the counts (no clock, no I/O).

CLOSED → OPEN when the window holds at least ``minimumCalls`` calls and the failure rate
or the slow-call rate reaches its threshold. HALF_OPEN → OPEN at the first failed (or,
with a slow-call rule, slow) probe; → CLOSED once ``halfOpenProbes`` probes succeeded.
OPEN → HALF_OPEN is the detector's timer, not a judgement on counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from control_plane.breakers.board import Phase
from control_plane.breakers.rules import BreakerRule
from control_plane.breakers.window import Counts


@dataclass(frozen=True, slots=True)
class Verdict:
    phase: Phase
    reason: str


def _calls(value: float) -> str:
    return f"{value:.0f}" if abs(value - round(value)) < 0.05 else f"{value:.1f}"


def judge_closed(rule: BreakerRule, window: Counts) -> Verdict | None:
    """OPEN, or None to stay CLOSED."""
    if window.calls < rule.minimum_calls or window.calls <= 0:
        return None
    failure_rate = window.rate(window.failures)
    if failure_rate >= rule.failure_rate:
        return Verdict(
            Phase.OPEN,
            f"failure rate {failure_rate:.0f}% of {_calls(window.calls)} calls "
            f"(threshold {rule.failure_rate}%, minimum {rule.minimum_calls} calls)",
        )
    if rule.slow_call_ms is not None and rule.slow_rate is not None:
        slow_rate = window.rate(window.slow)
        if slow_rate >= rule.slow_rate:
            return Verdict(
                Phase.OPEN,
                f"slow-call rate {slow_rate:.0f}% of {_calls(window.calls)} calls over {rule.slow_call_ms}ms "
                f"(threshold {rule.slow_rate}%, minimum {rule.minimum_calls} calls)",
            )
    return None


def judge_half_open(rule: BreakerRule, probes: Counts) -> Verdict | None:
    """OPEN again, CLOSED, or None to wait for more probes."""
    failed = probes.failures
    if rule.slow_call_ms is not None:
        failed = max(failed, probes.slow)
    if failed > 0:
        kind = "failed" if probes.failures > 0 else f"slower than {rule.slow_call_ms}ms"
        return Verdict(Phase.OPEN, f"half-open probe {kind} ({_calls(failed)} of {_calls(probes.calls)} probes)")
    if probes.calls >= rule.half_open_probes:
        return Verdict(Phase.CLOSED, f"{_calls(probes.calls)} half-open probes succeeded (needed {rule.half_open_probes})")
    return None
