"""The storage interfaces every backend implements; the service and Limiter see only these.

- ``Store``: one hit, one Decision (exact Redis, hybrid, local).
- ``ReservationBackend``: where hybrid mode takes and returns batches of tokens (Redis, or
  the in-memory ``LocalStore`` in tests).

Backends raise only ``errors.StoreError`` (converted at their edge).
"""

from __future__ import annotations

from typing import Protocol

from .algorithms import Grant
from .model import Decision, LimitSpec, Source


class Store(Protocol):
    async def hit(self, spec: LimitSpec, key: str, cost: int = 1) -> Decision:
        """Count ``cost`` hits of ``key`` against ``spec`` if they fit; never counts a denied hit."""

    async def close(self) -> None: ...


class ReservationBackend(Protocol):
    async def reserve(
        self, spec: LimitSpec, key: str, *, need: int, max_batch: int, divisor: int, instance: str
    ) -> Grant:
        """Take ``min(free, max(need, min(max_batch, free // divisor)))`` tokens, or none if
        ``need`` does not fit; recorded for ``instance`` under the current window/epoch."""

    async def release(self, spec: LimitSpec, key: str, *, tag: int, tokens: int, instance: str) -> int:
        """Give back up to ``tokens`` that ``instance`` reserved under ``tag``; 0 once ``tag`` ended."""


def decision(spec: LimitSpec, allowed: bool, remaining: int, ms: int, source: Source, tag: int = -1) -> Decision:
    """A Decision from a script's reply; ``ms == -1`` (never) reports one window."""
    after = spec.window_ms if ms < 0 else ms
    return Decision(allowed, spec.limit, max(0, remaining), after / 1000, source, tag=tag if allowed else -1)
