"""A circuit breaker for the Redis client: stop waiting on a store that is down, probe it back.

    closed ──(N consecutive failures, or failure ratio ≥ r over the last W calls)──► open
    open ──(cooldown elapsed; the next call is let through as a probe)──► half_open
    half_open ──(probe succeeds)──► closed        half_open ──(probe fails)──► open

While open, callers are refused at once (no socket, no timeout to wait out), so every hit
goes straight to its on_store_failure policy. The half-open probe is real traffic: the
first hit after the cooldown, so recovery needs no timer task. Every transition is logged
and counted (``limiter.metrics``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import structlog

from . import metrics

log = structlog.get_logger(component="ratelimit")

State = Literal["closed", "open", "half_open"]


@dataclass(frozen=True, slots=True)
class BreakerSettings:
    """``failure_ratio`` is judged over the last ``ratio_window`` calls, once that many were made."""

    consecutive_failures: int = 5
    failure_ratio: float = 0.5
    ratio_window: int = 20
    cooldown: float = 1.0
    half_open_probes: int = 1

    def __post_init__(self) -> None:
        if self.consecutive_failures < 1 or self.ratio_window < 1 or self.half_open_probes < 1:
            raise ValueError("breaker counts must be at least 1")
        if not 0 < self.failure_ratio <= 1:
            raise ValueError("failure_ratio must be in (0, 1]")
        if self.cooldown < 0:
            raise ValueError("cooldown must not be negative")


class CircuitBreaker:
    """Call ``acquire()`` before each call; then exactly one of ``success``, ``failure``, ``abandon``."""

    def __init__(
        self,
        settings: BreakerSettings | None = None,
        *,
        name: str = "redis",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings or BreakerSettings()
        self.name = name
        self._clock = clock
        self._state: State = "closed"
        self._consecutive = 0
        self._outcomes: deque[bool] = deque(maxlen=self.settings.ratio_window)
        self._failures_in_window = 0
        self._opened_at = 0.0
        self._probes = 0
        metrics.circuit_state(name, "closed")

    @property
    def state(self) -> State:
        """The state as of now (an open breaker whose cooldown has passed reads half_open)."""
        if self._state == "open" and self._clock() - self._opened_at >= self.settings.cooldown:
            self._move("half_open", reason="cooldown elapsed")
        return self._state

    def acquire(self) -> bool:
        """May a call go to the store now? In half_open, True takes one of the probe slots."""
        if self._state == "closed":
            return True
        if self.state == "half_open" and self._probes < self.settings.half_open_probes:
            self._probes += 1
            return True
        return False

    def success(self) -> None:
        if self._state == "half_open":
            self._probes = max(0, self._probes - 1)
            self._reset()
            self._move("closed", reason="probe succeeded")
            return
        self._consecutive = 0
        self._record(False)

    def failure(self) -> None:
        if self._state == "half_open":
            self._probes = max(0, self._probes - 1)
            self._open("probe failed")
            return
        if self._state == "open":
            return
        self._consecutive += 1
        self._record(True)
        s = self.settings
        if self._consecutive >= s.consecutive_failures:
            self._open(f"{self._consecutive} consecutive failures")
        elif len(self._outcomes) >= s.ratio_window and self._failures_in_window >= s.failure_ratio * len(self._outcomes):
            self._open(f"{self._failures_in_window} of the last {len(self._outcomes)} calls failed")

    def abandon(self) -> None:
        """The call ended without an outcome (cancelled by its caller): free its probe slot."""
        if self._state == "half_open":
            self._probes = max(0, self._probes - 1)

    def _record(self, failed: bool) -> None:
        if len(self._outcomes) == self._outcomes.maxlen and self._outcomes[0]:
            self._failures_in_window -= 1
        self._outcomes.append(failed)
        if failed:
            self._failures_in_window += 1

    def _reset(self) -> None:
        self._consecutive = 0
        self._outcomes.clear()
        self._failures_in_window = 0

    def _open(self, reason: str) -> None:
        self._opened_at = self._clock()
        self._reset()
        self._move("open", reason=reason)

    def _move(self, new: State, *, reason: str) -> None:
        old, self._state = self._state, new
        if new != "half_open":
            self._probes = 0
        if old == new:
            return
        metrics.circuit_transition(self.name, old, new)
        event = log.warning if new == "open" else log.info
        event("ratelimit_circuit", breaker=self.name, old=old, new=new, reason=reason)
