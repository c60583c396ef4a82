"""Which denials become audit events, so that an attack cannot flood the audit trail.

Denials of a verified identity (revoked, blocked, missing scope) are each an event: they
name an account and matter one by one. Denials of tokens that never verified (missing,
malformed, forged, expired) carry no identity; in each window the first few per reason
are events, and the rest are counted into one ``authz.denied.summary`` event per window.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from ext_authz.errors import AuthzError
from servicekit.audit import AUTHZ_DENIED, AuditEvent, AuditSink

SUMMARY = "authz.denied.summary"


class DenialAudit:
    def __init__(
        self, sink: AuditSink, *, window: float = 10.0, burst: int = 10, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._sink = sink
        self._window = window
        self._burst = burst
        self._clock = clock
        self._window_start = clock()
        self._seen: Counter[str] = Counter()
        self._suppressed: Counter[str] = Counter()

    def denied(self, error: AuthzError, route: str, request_id: str = "") -> None:
        """``request_id`` ties the event to the access-log line and the denial body."""
        self._roll()
        if error.subject is None:
            self._seen[error.reason] += 1
            if self._seen[error.reason] > self._burst:
                self._suppressed[error.reason] += 1
                return
        self._sink.emit(
            AuditEvent(
                kind=AUTHZ_DENIED,
                actor="ext_authz",
                subject=error.subject,
                jti=error.jti,
                reason=error.reason,
                details={"route": route, "status": error.status, "request_id": request_id},
            )
        )

    def flush(self) -> None:
        """Emit the summary of the window, if anything was held back; called periodically."""
        if self._suppressed:
            details: dict[str, str | int | float | bool | None] = {f"suppressed.{k}": v for k, v in sorted(self._suppressed.items())}
            details["window_seconds"] = self._window
            self._sink.emit(AuditEvent(kind=SUMMARY, actor="ext_authz", reason="rate_limited", details=details))
        self._seen.clear()
        self._suppressed.clear()
        self._window_start = self._clock()

    def _roll(self) -> None:
        if self._clock() - self._window_start >= self._window:
            self.flush()
