"""The rate-limit engine's exception tree: every error this package raises on purpose is one of these.

    RateLimitError             the root
     ├── LimitSpecError        ValueError too: a limit the algorithms cannot honour
     │                         (``limit_id``, ``field``, ``reason``: the rule, in words);
     │                         raised by ``LimitSpec``
     └── StoreError            why a store could not answer; ``transient: bool``; ``reason``:
          │                    a short code for logs and metrics
          ├── StoreTimeout     no answer within the timeout              (transient)
          ├── StoreUnreachable connection refused/reset, cluster down    (transient)
          ├── CircuitOpen      the breaker is open: Redis was not asked  (transient)
          └── StoreFault       Redis answered with an error: a script or data fault
                               (not transient: retrying will not help)

Each backend converts its own errors into a StoreError at its edge, in one place
(``redis_store.convert`` for redis-py and socket errors). The Limiter answers every
StoreError with the limit's ``on_store_failure`` policy.
"""

from __future__ import annotations


class RateLimitError(Exception):
    """The root of the tree."""


class LimitSpecError(RateLimitError, ValueError):
    """A LimitSpec that the algorithms cannot honour; the message names the limit and field."""

    def __init__(self, limit_id: str, field: str, reason: str) -> None:
        super().__init__(f"limit {limit_id!r}: {field}: {reason}")
        self.limit_id = limit_id
        self.field = field
        self.reason = reason


class StoreError(RateLimitError):
    transient = True
    reason = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class StoreTimeout(StoreError):
    reason = "timeout"


class StoreUnreachable(StoreError):
    reason = "connection"


class CircuitOpen(StoreError):
    reason = "circuit_open"


class StoreFault(StoreError):
    transient = False
    reason = "fault"
