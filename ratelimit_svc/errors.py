"""Why a store could not answer. Each backend converts its own errors here, at its edge.

    StoreError                 transient: bool; reason: a short code for logs and metrics
     ├── StoreTimeout          no answer within the timeout              (transient)
     ├── StoreUnreachable      connection refused/reset, cluster down    (transient)
     ├── CircuitOpen           the breaker is open: Redis was not asked  (transient)
     └── StoreFault            Redis answered with an error: a script or data fault
                               (not transient: retrying will not help)

The Limiter answers every StoreError with the limit's ``on_store_failure`` policy.
"""

from __future__ import annotations


class StoreError(Exception):
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
