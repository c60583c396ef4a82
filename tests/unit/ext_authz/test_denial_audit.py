"""An attack cannot flood the audit trail; identified denials are never summarised away."""

from __future__ import annotations

from ext_authz.denial_audit import SUMMARY, DenialAudit
from ext_authz.errors import ForbiddenError, TokenError
from servicekit.audit import AUTHZ_DENIED, MemoryAuditSink


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_unidentified_denials_are_sampled_and_summarised_per_window() -> None:
    sink, clock = MemoryAuditSink(), Clock()
    audit = DenialAudit(sink, window=10, burst=3, clock=clock)
    for _ in range(100):
        audit.denied(TokenError("bad_signature", "x"), "shop/orders")
    for _ in range(2):
        audit.denied(TokenError("missing", "x"), "shop/orders")
    assert [e.reason for e in sink.of_kind(AUTHZ_DENIED)] == ["bad_signature"] * 3 + ["missing"] * 2
    clock.now = 10.5
    audit.denied(TokenError("missing", "x"), "shop/orders")  # the next window starts with a summary
    [summary] = sink.of_kind(SUMMARY)
    assert summary.details["suppressed.bad_signature"] == 97
    assert "suppressed.missing" not in summary.details
    assert len(sink.of_kind(AUTHZ_DENIED)) == 6


def test_denials_of_a_verified_identity_are_each_an_event() -> None:
    sink = MemoryAuditSink()
    audit = DenialAudit(sink, window=10, burst=1, clock=Clock())
    for index in range(20):
        error = ForbiddenError("blocked", "the account is blocked")
        error.subject, error.jti = "alice", f"jti-{index}"
        audit.denied(error, "shop/orders")
    events = sink.of_kind(AUTHZ_DENIED)
    assert len(events) == 20 and {e.subject for e in events} == {"alice"}
    audit.flush()
    assert sink.of_kind(SUMMARY) == []
