"""RevocationSet: lookups, expiry and purging, with explicit times (no clock)."""

from __future__ import annotations

import math

from ext_authz.revocation.entries import Change, Entry, RevocationSet, Verdict

T = 1_700_000_000.0


def revoke(jti: str, exp: float) -> Change:
    return Change("revoke", Entry("jti", jti, exp))


def block(sub: str, until: float | None) -> Change:
    return Change("block", Entry("sub", sub, until))


def unblock(sub: str) -> Change:
    return Change("unblock", Entry("sub", sub, None))


def test_revoked_jti_counts_until_exp_plus_grace() -> None:
    entries = RevocationSet(grace=30)
    entries.apply(revoke("j1", T + 100))
    assert entries.lookup("j1", "alice", T) is Verdict.REVOKED
    assert entries.lookup("j1", "alice", T + 129.9) is Verdict.REVOKED
    assert entries.lookup("j1", "alice", T + 130) is Verdict.OK
    assert entries.lookup("j2", "alice", T) is Verdict.OK
    assert entries.lookup(None, "alice", T) is Verdict.OK


def test_blocks_with_and_without_an_end() -> None:
    entries = RevocationSet(grace=30)
    entries.apply(block("alice", T + 10))
    entries.apply(block("bob", None))
    assert entries.lookup(None, "alice", T + 9) is Verdict.BLOCKED
    assert entries.lookup(None, "alice", T + 10) is Verdict.OK
    assert entries.lookup("any", "bob", T + 10**8) is Verdict.BLOCKED
    assert entries.blocked["bob"] == math.inf
    entries.apply(unblock("bob"))
    assert entries.lookup(None, "bob", T) is Verdict.OK


def test_revocation_wins_over_a_block() -> None:
    entries = RevocationSet(grace=0)
    entries.apply(revoke("j1", T + 100))
    entries.apply(block("alice", None))
    assert entries.lookup("j1", "alice", T) is Verdict.REVOKED
    assert entries.lookup("j2", "alice", T) is Verdict.BLOCKED


def test_purge_drops_lapsed_entries_only() -> None:
    entries = RevocationSet(grace=5)
    entries.apply(revoke("short", T + 10))
    entries.apply(revoke("long", T + 100))
    entries.apply(block("temp", T + 10))
    entries.apply(block("forever", None))
    assert entries.purge(T + 14) == 1  # temp (until T+10); short lives until T+15
    assert entries.purge(T + 15) == 1
    assert set(entries.revoked) == {"long"}
    assert set(entries.blocked) == {"forever"}


def test_purge_keeps_an_entry_renewed_with_a_later_expiry() -> None:
    entries = RevocationSet(grace=0)
    entries.apply(block("alice", T + 10))
    entries.apply(block("alice", T + 50))  # the old heap item must not drop the new block
    entries.apply(revoke("j1", T + 10))
    entries.apply(revoke("j1", T + 50))
    assert entries.purge(T + 20) == 0
    assert entries.lookup("j1", "alice", T + 20) is Verdict.REVOKED
    assert entries.purge(T + 50) == 2
    assert not entries.revoked and not entries.blocked


def test_purge_after_unblock_is_harmless() -> None:
    entries = RevocationSet(grace=0)
    entries.apply(block("alice", T + 10))
    entries.apply(unblock("alice"))
    entries.apply(block("alice", None))
    assert entries.purge(T + 20) == 0
    assert entries.lookup(None, "alice", T + 20) is Verdict.BLOCKED


def test_add_skips_lapsed_entries() -> None:
    entries = RevocationSet(grace=10)
    entries.add(
        [
            Entry("jti", "old", T - 20),
            Entry("jti", "in-grace", T - 5),
            Entry("sub", "ended", T - 1),
            Entry("sub", "forever", None),
        ],
        T,
    )
    assert set(entries.revoked) == {"in-grace"}
    assert set(entries.blocked) == {"forever"}


def test_differences_counts_changed_missing_and_extra_entries() -> None:
    a, b = RevocationSet(grace=0), RevocationSet(grace=0)
    for s in (a, b):
        s.apply(revoke("same", T + 1))
    assert a.differences(b) == 0
    a.apply(revoke("only-a", T + 1))
    b.apply(block("only-b", None))
    a.apply(block("changed", T + 5))
    b.apply(block("changed", T + 6))
    assert a.differences(b) == 3


def test_entries_round_trip() -> None:
    entries = RevocationSet(grace=0)
    entries.apply(revoke("j1", T + 1))
    entries.apply(block("alice", None))
    entries.apply(block("bob", T + 2))
    assert sorted(entries.entries(), key=lambda e: e.value) == [
        Entry("sub", "alice", None),
        Entry("sub", "bob", T + 2),
        Entry("jti", "j1", T + 1),
    ]
