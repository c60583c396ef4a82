"""The W3C ``traceparent`` a call carries: which trace a service's span joins, and its parent.

Envoy's tracer writes it into the check's HTTP headers (ext_authz over HTTP) or the
gRPC call's metadata (ext_authz over gRPC, ratelimit_svc) when the gateway traces, so
the header names the span Envoy opened for that call.
"""

from __future__ import annotations

from typing import Any, NamedTuple

TRACEPARENT = "traceparent"
_ZERO_TRACE = bytes(16)
_ZERO_SPAN = bytes(8)


class TraceParent(NamedTuple):
    trace_id: bytes
    """16 bytes."""
    span_id: bytes
    """8 bytes: the caller's span, this span's parent."""
    sampled: bool


def parse_traceparent(value: str | None) -> TraceParent | None:
    """``00-<32 hex>-<16 hex>-<2 hex>``; None for anything else (absent, malformed, all-zero
    ids). Upper-case hex is accepted (a receiver may be lenient; Envoy writes lower case)."""
    if not value or len(value) < 55 or value[2] != "-" or value[35] != "-" or value[52] != "-":
        return None
    if (value[:2] == "00" and len(value) != 55) or value[:2] in ("ff", "FF"):
        return None
    try:
        trace_id, span_id, flags = bytes.fromhex(value[3:35]), bytes.fromhex(value[36:52]), int(value[53:55], 16)
        int(value[:2], 16)
    except ValueError:
        return None
    if len(trace_id) != 16 or len(span_id) != 8 or trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN or " " in value[53:55]:
        return None
    return TraceParent(trace_id, span_id, bool(flags & 1))


def call_traceparent(context: Any) -> str | None:
    """The ``traceparent`` of a gRPC call's metadata (a ``grpc.aio.ServicerContext``)."""
    for key, value in context.invocation_metadata() or ():
        if key == TRACEPARENT:
            return str(value)
    return None
