"""Revoked jtis and blocked subjects: the values (``Entry``, ``Change``) and the pure set
that holds them (``RevocationSet``). No I/O, no clock: every call takes ``now``.

The same set holds the API keys (``ApiKey``, by the sha256 of the key): they travel the
same channel and resync as revocations, so a revoked key is gone from every instance as
fast as a revoked jti (``ext_authz/check/api_keys.py``).

A revoked jti counts until ``exp + grace`` (``grace`` must cover the largest issuer
leeway, since a token is accepted until ``exp + leeway``); the Redis key expires then
too. A block counts until ``until`` or forever.
"""

from __future__ import annotations

import enum
import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from servicekit.api_key_store import ApiKey

__all__ = ["ApiKey", "Change", "Entry", "Kind", "RevocationSet", "Verdict"]

Kind = Literal["jti", "sub", "key"]
"""``jti``: a revoked token id; ``sub``: a blocked subject; ``key``: an API key (by its id)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One revocation or block. ``expires_at`` is Unix seconds; None: a permanent block.

    For a revoked jti, ``expires_at`` is the token's ``exp``.
    """

    kind: Kind
    value: str
    expires_at: float | None
    api_key: ApiKey | None = None
    """For ``key`` entries (``value`` is then the key id)."""


@dataclass(frozen=True, slots=True)
class Change:
    """One pub/sub message: ``revoke``, ``block`` and ``key`` add ``entry``, ``unblock``
    and ``unkey`` remove it."""

    op: Literal["revoke", "block", "unblock", "key", "unkey"]
    entry: Entry


class Verdict(enum.Enum):
    OK = "ok"
    REVOKED = "revoked"
    BLOCKED = "blocked"
    UNAVAILABLE = "unavailable"


class RevocationSet:
    """Revoked jtis and blocked subjects with their expiries; pure, no I/O, no clock.

    Entries are dropped by ``purge(now)`` once lapsed; ``lookup`` ignores lapsed ones, so
    correctness never depends on how often ``purge`` runs.
    """

    def __init__(self, *, grace: float) -> None:
        self.grace = grace
        self.revoked: dict[str, float] = {}
        """jti → token exp; counts until exp + grace."""
        self.blocked: dict[str, float] = {}
        """subject → until; math.inf for a permanent block."""
        self.api_keys: dict[bytes, ApiKey] = {}
        """sha256 of the key → the key's record: a lookup by hash, never a comparison of keys."""
        self._heap: list[tuple[float, Kind, str]] = []

    def lookup(self, jti: str | None, subject: str, now: float) -> Verdict:
        if jti is not None:
            exp = self.revoked.get(jti)
            if exp is not None and now < exp + self.grace:
                return Verdict.REVOKED
        until = self.blocked.get(subject)
        if until is not None and now < until:
            return Verdict.BLOCKED
        return Verdict.OK

    def api_key(self, key_hash: bytes) -> ApiKey | None:
        return self.api_keys.get(key_hash)

    def apply(self, change: Change) -> None:
        entry = change.entry
        if entry.api_key is not None:
            if change.op == "key":
                self.api_keys[entry.api_key.key_hash] = entry.api_key
            else:
                self.api_keys.pop(entry.api_key.key_hash, None)
        elif change.op == "unblock":
            self.blocked.pop(entry.value, None)
        elif change.op == "revoke":
            assert entry.expires_at is not None
            self.revoked[entry.value] = entry.expires_at
            heapq.heappush(self._heap, (entry.expires_at + self.grace, "jti", entry.value))
        else:
            until = math.inf if entry.expires_at is None else entry.expires_at
            self.blocked[entry.value] = until
            if until != math.inf:
                heapq.heappush(self._heap, (until, "sub", entry.value))

    def add(self, entries: Iterable[Entry], now: float) -> None:
        """Add stored entries (a scan's result), skipping those already lapsed."""
        for entry in entries:
            if entry.api_key is not None:
                self.apply(Change("key", entry))
            elif entry.kind == "jti":
                assert entry.expires_at is not None
                if now < entry.expires_at + self.grace:
                    self.apply(Change("revoke", entry))
            elif entry.expires_at is None or now < entry.expires_at:
                self.apply(Change("block", entry))

    def purge(self, now: float) -> int:
        """Drop lapsed entries; returns how many."""
        dropped = 0
        heap = self._heap
        while heap and heap[0][0] <= now:
            drop_at, kind, value = heapq.heappop(heap)
            if kind == "jti":
                exp = self.revoked.get(value)
                if exp is not None and exp + self.grace <= now:
                    del self.revoked[value]
                    dropped += 1
            else:
                until = self.blocked.get(value)
                if until is not None and until <= now:
                    del self.blocked[value]
                    dropped += 1
        return dropped

    def differences(self, other: RevocationSet) -> int:
        """How many entries differ between two sets (0 when equal)."""
        if self.revoked == other.revoked and self.blocked == other.blocked and self.api_keys == other.api_keys:
            return 0
        count = 0
        pairs: tuple[tuple[dict[Any, Any], dict[Any, Any]], ...] = (
            (self.revoked, other.revoked), (self.blocked, other.blocked), (self.api_keys, other.api_keys)
        )
        for mine, theirs in pairs:
            count += sum(1 for k, v in mine.items() if theirs.get(k) != v)
            count += sum(1 for k in theirs if k not in mine)
        return count

    def entries(self) -> list[Entry]:
        out = [Entry("jti", jti, exp) for jti, exp in self.revoked.items()]
        out += [Entry("sub", sub, None if until == math.inf else until) for sub, until in self.blocked.items()]
        out += [Entry("key", key.key_id, None, key) for key in self.api_keys.values()]
        return out
