"""telemetry's Prometheus metrics, declared once.

    gatehouse_telemetry_access_received_total          entries Envoy sent over ALS
    gatehouse_telemetry_access_sent_total              access events the sink accepted (Kafka: acknowledged)
    gatehouse_telemetry_access_dropped_total{reason}   buffer_full, sink_error, invalid
    gatehouse_telemetry_access_buffered                events waiting in the bounded buffer
    gatehouse_telemetry_audit_sent_total               audit events Kafka acknowledged (live)
    gatehouse_telemetry_audit_spooled_total            audit events written (fsync) to the spool
    gatehouse_telemetry_audit_replayed_total           spooled audit events Kafka acknowledged
    gatehouse_telemetry_audit_dropped_total{reason}    spool_full, spool_error, spool_corrupt, closed (the only losses)
    gatehouse_telemetry_audit_spool_bytes              bytes in the spool not yet acknowledged
    gatehouse_telemetry_audit_spooling                 1 while audit events go to the spool
    gatehouse_telemetry_kafka_errors_total{sink,reason}  timeout, connection, kafka, other
"""

from __future__ import annotations

import asyncio
from typing import Final

from prometheus_client import Counter, Gauge

ACCESS_RECEIVED = Counter("gatehouse_telemetry_access_received_total", "Access log entries received from Envoy")
ACCESS_SENT = Counter("gatehouse_telemetry_access_sent_total", "Access events delivered to the sink")
ACCESS_DROPPED = Counter(
    "gatehouse_telemetry_access_dropped_total", "Access events dropped (never blocking Envoy)", ["reason"]
)
ACCESS_BUFFERED = Gauge("gatehouse_telemetry_access_buffered", "Access events waiting in the bounded buffer")
AUDIT_SENT = Counter("gatehouse_telemetry_audit_sent_total", "Audit events acknowledged by Kafka")
AUDIT_SPOOLED = Counter("gatehouse_telemetry_audit_spooled_total", "Audit events written to the local spool")
AUDIT_REPLAYED = Counter("gatehouse_telemetry_audit_replayed_total", "Spooled audit events acknowledged by Kafka")
AUDIT_DROPPED = Counter("gatehouse_telemetry_audit_dropped_total", "Audit events lost", ["reason"])
AUDIT_SPOOL_BYTES = Gauge("gatehouse_telemetry_audit_spool_bytes", "Spool bytes not yet acknowledged by Kafka")
AUDIT_SPOOLING = Gauge("gatehouse_telemetry_audit_spooling", "1 while audit events go to the spool")
KAFKA_ERRORS = Counter("gatehouse_telemetry_kafka_errors_total", "Kafka failures", ["sink", "reason"])

DROP_BUFFER_FULL: Final = ACCESS_DROPPED.labels("buffer_full")
DROP_SINK_ERROR: Final = ACCESS_DROPPED.labels("sink_error")
DROP_INVALID: Final = ACCESS_DROPPED.labels("invalid")


def kafka_error(sink: str, exc: BaseException) -> str:
    """Count one Kafka failure by kind; returns the reason label."""
    name = type(exc).__name__
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)) or "Timeout" in name:
        reason = "timeout"
    elif "Connection" in name or isinstance(exc, OSError):
        reason = "connection"
    elif "Kafka" in name:
        reason = "kafka"
    else:
        reason = "other"
    KAFKA_ERRORS.labels(sink, reason).inc()
    return reason
