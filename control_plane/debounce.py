"""Coalesce bursts of changes into one rebuild.

A rebuild starts after ``quiet`` seconds without a new change, but never later than
``max_delay`` after the first change of a burst, so a steady trickle cannot starve it.
Changes that arrive during a rebuild trigger one more rebuild after it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import structlog

log = structlog.get_logger(component="debounce")


class Debouncer:
    def __init__(self, action: Callable[[float], Awaitable[None]], *, quiet: float, max_delay: float) -> None:
        self._action = action
        self._quiet = quiet
        self._max_delay = max_delay
        self._poked = asyncio.Event()
        self._earliest: float | None = None
        self._urgent = False

    def poke(self, seen_at: float | None = None) -> None:
        """Note a change; ``seen_at`` is when its source saw it (for latency metrics)."""
        seen = time.monotonic() if seen_at is None else seen_at
        self._earliest = seen if self._earliest is None else min(self._earliest, seen)
        self._poked.set()

    def poke_now(self) -> None:
        """Note a change that must not wait for ``quiet`` (a breaker move): rebuild at once."""
        self._urgent = True
        self.poke()

    async def run(self) -> None:
        while True:
            await self._poked.wait()
            deadline = time.monotonic() + self._max_delay
            while True:
                self._poked.clear()
                if self._urgent:
                    break
                remaining = min(self._quiet, deadline - time.monotonic())
                if remaining <= 0:
                    break
                try:
                    await asyncio.wait_for(self._poked.wait(), remaining)
                except asyncio.TimeoutError:
                    break
            self._poked.clear()
            self._urgent = False
            seen_at = self._earliest if self._earliest is not None else time.monotonic()
            self._earliest = None
            try:
                await self._action(seen_at)
            except Exception:  # noqa: BLE001 - a failed rebuild must not stop later ones
                log.exception("rebuild_failed")
