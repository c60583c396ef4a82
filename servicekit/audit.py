"""Audit events: who denied, revoked, blocked or called what, and why.

An ``AuditEvent`` names its subject and jti, never a token, a credential or a whole
claim set: ``details`` holds scalars only, and keys that suggest secrets are refused.
Sinks implement one method, ``emit(event)``; it must not block the event loop or raise
(a sink that can fail, such as the Kafka one in ``audit_kafka``, buffers, spools and counts its losses).

- ``LogAuditSink``: one structlog JSON line per event (``event="audit"``);
- ``MemoryAuditSink``: keeps events in a list, for tests and ``gatehouse dev``.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import structlog

AUTHZ_DENIED: Final = "authz.denied"
REVOCATION_REVOKED: Final = "revocation.revoked"
REVOCATION_BLOCKED: Final = "revocation.blocked"
REVOCATION_UNBLOCKED: Final = "revocation.unblocked"
ADMIN_CALL: Final = "admin.call"
CONFIG_APPLIED: Final = "config.applied"
CONFIG_REJECTED: Final = "config.rejected"
CONFIG_NACKED: Final = "config.nacked"
BREAKER_TRANSITION: Final = "breaker.transition"
APIKEY_CREATED: Final = "apikey.created"
APIKEY_REVOKED: Final = "apikey.revoked"
"""An API key made or revoked (``gatehouse apikey``, or a Secret synced): consumer and key id, never the key."""

Detail = str | int | float | bool | None

INSTANCE: Final = os.environ.get("POD_NAME") or socket.gethostname()
"""This process's name in audit events: with several replicas, each reports what it did."""

_SECRET_WORDS = ("token", "authorization", "credential", "password", "secret", "claims")


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditEvent:
    kind: str
    """``authz.denied``, ``revocation.revoked``, ``revocation.blocked``, ``revocation.unblocked``, ``admin.call``..."""
    actor: str
    """Who acted: ``ext_authz`` for a denial, ``admin`` for an admin API caller."""
    subject: str | None = None
    jti: str | None = None
    reason: str = ""
    details: Mapping[str, Detail] = field(default_factory=dict)
    event_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    time: float = field(default_factory=time.time)
    """Unix seconds."""

    def __post_init__(self) -> None:
        for key, value in self.details.items():
            lowered = key.lower()
            if any(word in lowered for word in _SECRET_WORDS):
                raise ValueError(f"audit details must not carry secrets: key {key!r}")
            if not isinstance(value, (str, int, float, bool)) and value is not None:
                raise ValueError(f"audit detail {key!r} must be a scalar")

    def as_dict(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "time": self.time,
            "kind": self.kind,
            "actor": self.actor,
            "subject": self.subject,
            "jti": self.jti,
            "reason": self.reason,
            "details": dict(self.details),
        }


class AuditSink(Protocol):
    def emit(self, event: AuditEvent) -> None: ...


class LogAuditSink:
    """Each event as one structlog line: ``event="audit"`` plus the event's fields."""

    def __init__(self) -> None:
        self._log = structlog.get_logger(component="audit")

    def emit(self, event: AuditEvent) -> None:
        self._log.info("audit", **event.as_dict())


class MemoryAuditSink:
    """Keeps every event (for tests and local runs)."""

    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    def emit(self, event: AuditEvent) -> None:
        self.events.append(event)

    def of_kind(self, kind: str) -> list[AuditEvent]:
        return [e for e in self.events if e.kind == kind]
