"""telemetry's Prometheus metrics, declared once.

    gatehouse_telemetry_access_received_total          entries Envoy sent over ALS
    gatehouse_telemetry_access_sent_total              access events the sink accepted (Kafka: acknowledged)
    gatehouse_telemetry_access_dropped_total{reason}   buffer_full, sink_error, invalid
    gatehouse_telemetry_access_buffered                events waiting in the bounded buffer
    gatehouse_breaker_calls_tallied_total              entries counted as breaker calls (before the buffer)
    gatehouse_breaker_tally_flushes_total{outcome}     ok, timeout, refused, unreachable, unresolved
    gatehouse_breaker_tallies_dropped_total{reason}    calls in tallies of a failed flush (same reasons)

The audit sink's metrics live with it (servicekit/audit_kafka.py), as does
``gatehouse_telemetry_kafka_errors_total`` (servicekit/kafka.py): every service has them.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Gauge

ACCESS_RECEIVED = Counter("gatehouse_telemetry_access_received_total", "Access log entries received from Envoy")
ACCESS_SENT = Counter("gatehouse_telemetry_access_sent_total", "Access events delivered to the sink")
ACCESS_DROPPED = Counter(
    "gatehouse_telemetry_access_dropped_total", "Access events dropped (never blocking Envoy)", ["reason"]
)
ACCESS_BUFFERED = Gauge("gatehouse_telemetry_access_buffered", "Access events waiting in the bounded buffer")

DROP_BUFFER_FULL: Final = ACCESS_DROPPED.labels("buffer_full")
DROP_SINK_ERROR: Final = ACCESS_DROPPED.labels("sink_error")
DROP_INVALID: Final = ACCESS_DROPPED.labels("invalid")


BREAKER_CALLS = Counter(
    "gatehouse_breaker_calls_tallied_total", "Access-log entries counted as calls of a route breaker (before the buffer)"
)
BREAKER_FLUSHES = Counter(
    "gatehouse_breaker_tally_flushes_total", "Tally POSTs to the control plane, by outcome", ["outcome"]
)
BREAKER_DROPPED = Counter(
    "gatehouse_breaker_tallies_dropped_total",
    "Calls in tallies lost because their POST to the control plane failed (breakers keep their state)",
    ["reason"],
)
