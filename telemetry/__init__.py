"""Envoy access-log service (ALS) → Kafka / file / stdout.

See docs/telemetry.md for the event schema, the configuration and the failure policy.
The audit sink every service shares lives in the kernel (servicekit/audit_kafka.py).
"""

from __future__ import annotations

from telemetry.access_event import encode_access_event
from telemetry.buffer import EventBuffer
from telemetry.config import TelemetryConfig, load_telemetry_config

__all__ = [
    "EventBuffer",
    "TelemetryConfig",
    "encode_access_event",
    "load_telemetry_config",
]
