"""Freshness and the ``revocation.onUnavailable`` policy: what a check answers, given what
the mirror holds and how recently it was known to be in sync. Pure: every method takes
``now`` (Unix seconds), so tests drive the clock; the I/O that feeds it is
``mirror.py``.

The mirror is *in sync* while its subscription is confirmed alive (a PING on the
subscription connection answered at least every ``heartbeat``) and its last resync
succeeded. ``synced_at`` is the last moment it was known to be in sync. Any failure (a
dropped connection, a missed pong, a failed scan, a timeout) makes it *degraded* until it
has resubscribed and resynced.

``check(jti, subject, now)`` answers from memory:

- in sync (and ``synced_at`` no older than ``stale_after``): ``REVOKED`` if the jti is
  revoked, else ``BLOCKED`` if the subject is blocked, else ``OK``;
- otherwise the policy ``revocation.onUnavailable`` decides:
    - ``closed`` (default): every check is ``UNAVAILABLE`` (the caller answers 503);
    - ``open``: the mirror's answer, so what it already knows is still denied and
      everything else is allowed;
    - ``lastKnown``: the mirror's answer while ``now - synced_at <= last_known_for``,
      ``UNAVAILABLE`` after that (and before the first sync).

Before the first full sync (``ready`` is False), ``closed`` and ``lastKnown`` answer
``UNAVAILABLE`` and ``open`` answers ``OK``.
"""

from __future__ import annotations

from typing import Literal

from ext_authz.revocation.entries import RevocationSet, Verdict

__all__ = ["MirrorState", "Policy", "State"]

Policy = Literal["closed", "open", "lastKnown"]
State = Literal["syncing", "in_sync", "degraded"]


class MirrorState:
    """The mirror's contents plus its sync status, and the policy that turns both into a
    verdict. Pure: every method takes ``now`` (Unix seconds), so tests drive the clock.
    """

    def __init__(
        self, *, policy: Policy, last_known_for: float, stale_after: float, grace: float
    ) -> None:
        self.policy: Policy = policy
        self.last_known_for = last_known_for
        self.stale_after = stale_after
        self.entries = RevocationSet(grace=grace)
        self.state: State = "syncing"
        self.synced_at: float | None = None
        self.reason = "not synced yet"

    @property
    def ready(self) -> bool:
        """A first full sync has completed (ever)."""
        return self.synced_at is not None

    def check(self, jti: str | None, subject: str, now: float) -> Verdict:
        known = self.entries.lookup(jti, subject, now)
        return known if self.usable(now) else Verdict.UNAVAILABLE

    def usable(self, now: float) -> bool:
        """Whether what the mirror holds may decide now (else ``UNAVAILABLE``): the same
        rule for revocations and for API keys."""
        synced_at = self.synced_at
        if synced_at is None:
            return self.policy == "open"
        if self.state == "in_sync" and now - synced_at <= self.stale_after:
            return True
        if self.policy == "open":
            return True
        return self.policy == "lastKnown" and now - synced_at <= self.last_known_for

    def fresh(self, now: float) -> bool:
        return self.state == "in_sync" and self.synced_at is not None and now - self.synced_at <= self.stale_after

    def lag(self, now: float) -> float | None:
        """Seconds since last known in sync; None before the first sync."""
        return None if self.synced_at is None else max(0.0, now - self.synced_at)

    def mark_synced(self, at: float) -> bool:
        """In sync as of ``at``; True if that is a change of state."""
        changed = self.state != "in_sync"
        self.state = "in_sync"
        self.reason = "subscribed and resynced"
        if self.synced_at is None or at > self.synced_at:
            self.synced_at = at
        return changed

    def mark_lost(self, reason: str) -> bool:
        """Cannot be refreshed any more; True if that is a change of state."""
        changed = self.state == "in_sync"
        if self.state == "in_sync":
            self.state = "degraded"
        self.reason = reason
        return changed

    def replace(self, fresh: RevocationSet, now: float) -> int:
        """Swap in a resync's result; returns how many entries it corrected."""
        self.entries.purge(now)
        fresh.purge(now)
        repaired = self.entries.differences(fresh)
        self.entries = fresh
        return repaired
