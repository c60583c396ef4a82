"""MirrorState: what check() answers in each sync state under each policy (fake clock)."""

from __future__ import annotations

import pytest

from ext_authz.revocation.policy import MirrorState, Policy
from ext_authz.revocation.entries import Change, Entry, Verdict

T = 1_700_000_000.0
LAST_KNOWN_FOR = 60.0
STALE_AFTER = 4.0

U, OK, REVOKED = Verdict.UNAVAILABLE, Verdict.OK, Verdict.REVOKED


def state(policy: Policy) -> MirrorState:
    s = MirrorState(policy=policy, last_known_for=LAST_KNOWN_FOR, stale_after=STALE_AFTER, grace=0)
    s.entries.apply(Change("revoke", Entry("jti", "known", T + 3600)))
    return s


def answers(s: MirrorState, now: float) -> tuple[Verdict, Verdict]:
    """(a revoked jti the mirror knows, a jti it does not know)."""
    return s.check("known", "alice", now), s.check("unknown", "alice", now)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("closed", (U, U)), ("open", (REVOKED, OK)), ("lastKnown", (U, U))],
)
def test_before_the_first_sync(policy: Policy, expected: tuple[Verdict, Verdict]) -> None:
    s = state(policy)
    assert not s.ready
    assert answers(s, T) == expected


@pytest.mark.parametrize("policy", ["closed", "open", "lastKnown"])
def test_in_sync_the_mirror_decides(policy: Policy) -> None:
    s = state(policy)
    assert s.mark_synced(T)
    assert s.ready and s.fresh(T + STALE_AFTER)
    assert answers(s, T + STALE_AFTER) == (REVOKED, OK)


# (seconds after the last good sync, closed, open, lastKnown)
DEGRADED_TABLE = [
    (0.0, (U, U), (REVOKED, OK), (REVOKED, OK)),
    (30.0, (U, U), (REVOKED, OK), (REVOKED, OK)),
    (LAST_KNOWN_FOR, (U, U), (REVOKED, OK), (REVOKED, OK)),
    (LAST_KNOWN_FOR + 0.001, (U, U), (REVOKED, OK), (U, U)),
    (10 * LAST_KNOWN_FOR, (U, U), (REVOKED, OK), (U, U)),
]


@pytest.mark.parametrize(("after", "closed", "open_", "last_known"), DEGRADED_TABLE)
def test_degraded(after: float, closed: tuple[Verdict, ...], open_: tuple[Verdict, ...], last_known: tuple[Verdict, ...]) -> None:
    for policy, expected in (("closed", closed), ("open", open_), ("lastKnown", last_known)):
        s = state(policy)  # type: ignore[arg-type]
        s.mark_synced(T)
        assert s.mark_lost("connection refused")
        assert s.state == "degraded" and s.ready
        assert answers(s, T + after) == expected, policy


@pytest.mark.parametrize(("policy", "expected"), [("closed", (U, U)), ("open", (REVOKED, OK)), ("lastKnown", (REVOKED, OK))])
def test_in_sync_but_not_heard_of_for_too_long_counts_as_degraded(policy: Policy, expected: tuple[Verdict, Verdict]) -> None:
    """A wedged background task cannot keep the mirror 'in sync' forever."""
    s = state(policy)
    s.mark_synced(T)
    assert answers(s, T + STALE_AFTER) == (REVOKED, OK)
    assert not s.fresh(T + STALE_AFTER + 0.1)
    assert answers(s, T + STALE_AFTER + 0.1) == expected


def test_recovery_makes_the_mirror_decide_again() -> None:
    s = state("closed")
    s.mark_synced(T)
    s.mark_lost("down")
    assert answers(s, T + 100) == (U, U)
    assert s.mark_synced(T + 100)
    assert answers(s, T + 100) == (REVOKED, OK)
    assert s.lag(T + 101) == pytest.approx(1.0)


def test_transitions_are_reported_once() -> None:
    s = state("closed")
    assert not s.mark_lost("refused")  # still syncing: not a transition to degraded
    assert s.state == "syncing" and s.reason == "refused"
    assert s.mark_synced(T)
    assert not s.mark_synced(T + 1)
    assert s.mark_lost("down")
    assert not s.mark_lost("still down")
    assert s.synced_at == T + 1


def test_synced_at_never_moves_back() -> None:
    s = state("lastKnown")
    s.mark_synced(T + 10)
    s.mark_synced(T + 5)  # a late pong for an older ping
    assert s.synced_at == T + 10


def test_blocked_subject_under_open_policy_while_degraded() -> None:
    s = state("open")
    s.entries.apply(Change("block", Entry("sub", "mallory", None)))
    s.mark_synced(T)
    s.mark_lost("down")
    assert s.check(None, "mallory", T + 1000) is Verdict.BLOCKED
    assert s.check(None, "alice", T + 1000) is Verdict.OK
