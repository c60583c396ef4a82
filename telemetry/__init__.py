"""Envoy access-log service (ALS) → Kafka / file / stdout, and the Kafka audit sink.

See docs/telemetry.md for the event schema, the configuration and the failure policy.
"""

from __future__ import annotations

from telemetry.access_event import REQUEST_HEADERS, RESPONSE_HEADERS, SCHEMA_VERSION, encode_access_event
from telemetry.audit_sink import KafkaAuditSink
from telemetry.buffer import EventBuffer
from telemetry.config import TelemetryConfig, load_telemetry_config
from telemetry.spool import Spool

__all__ = [
    "EventBuffer",
    "KafkaAuditSink",
    "REQUEST_HEADERS",
    "RESPONSE_HEADERS",
    "SCHEMA_VERSION",
    "Spool",
    "TelemetryConfig",
    "encode_access_event",
    "load_telemetry_config",
]
