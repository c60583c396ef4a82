"""The bounded buffer between the ALS handler and a sink: ``offer`` never blocks or waits.

When the buffer holds ``max_events``, the new event is dropped and counted
(``gatehouse_telemetry_access_dropped_total{reason="buffer_full"}``): Envoy's request
path never waits for Kafka, a disk or a terminal.
"""

from __future__ import annotations

import asyncio
from collections import deque

from telemetry import metrics


class EventBuffer:
    def __init__(self, *, max_events: int) -> None:
        if max_events < 1:
            raise ValueError("max_events must be at least 1")
        self.max_events = max_events
        self._events: deque[bytes] = deque()
        self._ready = asyncio.Event()
        self.dropped = 0
        metrics.ACCESS_BUFFERED.set_function(lambda: len(self._events))

    def __len__(self) -> int:
        return len(self._events)

    @property
    def full(self) -> bool:
        return len(self._events) >= self.max_events

    def drop(self, count: int = 1) -> None:
        """Count events refused before they were even encoded (the buffer was full)."""
        self.dropped += count
        metrics.DROP_BUFFER_FULL.inc(count)

    def offer(self, event: bytes) -> bool:
        """Queue an event; False (and counted) if the buffer is full."""
        events = self._events
        if len(events) >= self.max_events:
            self.dropped += 1
            metrics.DROP_BUFFER_FULL.inc()
            return False
        events.append(event)
        if not self._ready.is_set():
            self._ready.set()
        return True

    def take(self, limit: int) -> list[bytes]:
        """Up to ``limit`` events, oldest first."""
        events = self._events
        count = min(limit, len(events))
        batch = [events.popleft() for _ in range(count)]
        if not events:
            self._ready.clear()
        return batch

    async def wait(self) -> None:
        """Return once at least one event is buffered."""
        await self._ready.wait()
