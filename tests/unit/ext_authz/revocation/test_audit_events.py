"""Audit events carry identifiers, never secrets; the log sink writes one line each."""

from __future__ import annotations

import json

import pytest
import structlog

from servicekit.audit import ADMIN_CALL, AUTHZ_DENIED, REVOCATION_REVOKED, AuditEvent, AuditSink, LogAuditSink, MemoryAuditSink


def test_event_defaults_and_dict() -> None:
    a = AuditEvent(kind=REVOCATION_REVOKED, actor="admin", jti="j1", reason="leaked", details={"expires_at": 5})
    b = AuditEvent(kind=REVOCATION_REVOKED, actor="admin", jti="j1")
    assert a.event_id != b.event_id and len(a.event_id) == 36
    assert a.time > 0
    assert a.as_dict() == {
        "event_id": a.event_id,
        "time": a.time,
        "kind": "revocation.revoked",
        "actor": "admin",
        "subject": None,
        "jti": "j1",
        "reason": "leaked",
        "details": {"expires_at": 5},
    }


@pytest.mark.parametrize("key", ["token", "access_token", "Authorization", "credential", "claims", "client_secret"])
def test_secret_looking_details_are_refused(key: str) -> None:
    with pytest.raises(ValueError, match="secrets"):
        AuditEvent(kind=AUTHZ_DENIED, actor="ext_authz", details={key: "x"})


def test_details_must_be_scalars() -> None:
    with pytest.raises(ValueError, match="scalar"):
        AuditEvent(kind=AUTHZ_DENIED, actor="ext_authz", details={"payload": {"sub": "x"}})  # type: ignore[dict-item]


def test_log_sink_writes_one_json_line(capsys: pytest.CaptureFixture[str]) -> None:
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.processors.JSONRenderer()],
        logger_factory=structlog.PrintLoggerFactory(),
        cache_logger_on_first_use=False,
    )
    try:
        sink: AuditSink = LogAuditSink()
        event = AuditEvent(kind=ADMIN_CALL, actor="admin", details={"method": "Revoke", "outcome": "ok"})
        sink.emit(event)
    finally:
        structlog.reset_defaults()
    (line,) = capsys.readouterr().out.strip().splitlines()
    record = json.loads(line)
    assert record["event"] == "audit"
    assert record["component"] == "audit"
    assert record["kind"] == "admin.call" and record["event_id"] == event.event_id
    assert record["details"] == {"method": "Revoke", "outcome": "ok"}


def test_memory_sink() -> None:
    sink = MemoryAuditSink()
    sink.emit(AuditEvent(kind=ADMIN_CALL, actor="admin"))
    sink.emit(AuditEvent(kind=REVOCATION_REVOKED, actor="admin", jti="j"))
    assert [e.kind for e in sink.of_kind(REVOCATION_REVOKED)] == ["revocation.revoked"]
