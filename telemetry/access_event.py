"""One Envoy ``HTTPAccessLogEntry`` → one compact JSON access event (bytes).

This runs once per proxied request, so it reads each proto field once, formats the
timestamp from a one-second cache, and skips the response-flag walk when no flag is set.
The schema is documented in docs/telemetry.md; bump ``SCHEMA_VERSION`` on any change
that is not a pure addition.

Headers read from ``request_headers`` / ``response_headers`` exist only if Envoy's
``http_grpc`` logger lists them (``additional_request_headers_to_log`` and
``additional_response_headers_to_log``): see ``servicekit/access_log_contract.py``.
"""

from __future__ import annotations

import json
import time
from typing import Any, Final

from envoy.data.accesslog.v3 import accesslog_pb2
from google.protobuf import wrappers_pb2

from servicekit.check_contract import USER_ID_HEADER
from servicekit.kafka import SCHEMA_VERSION
from telemetry.response_flags import short_codes

ACCESS_TYPE: Final = "access"


_METHODS: Final = {
    value.number: value.name
    for value in accesslog_pb2.HTTPRequestProperties.DESCRIPTOR.fields_by_name["request_method"].enum_type.values
    if value.number
}

_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, check_circular=False).encode


class _SecondCache:
    """``YYYY-MM-DDTHH:MM:SS`` of the last second seen: consecutive entries share it."""

    __slots__ = ("second", "text")

    def __init__(self) -> None:
        self.second = -1
        self.text = ""

    def format(self, seconds: int, nanos: int) -> str:
        if seconds != self.second:
            self.text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
            self.second = seconds
        return f"{self.text}.{nanos // 1_000_000:03d}Z"


_TIME = _SecondCache()


def _trace_id(headers: Any) -> str | None:
    parent = headers.get("traceparent")
    if parent:
        # W3C: version-traceid-parentid-flags; the trace id is 32 lowercase hex digits.
        parts = parent.split("-")
        if len(parts) >= 4 and len(parts[1]) == 32:
            return str(parts[1])
    b3 = headers.get("x-b3-traceid")
    return str(b3) if b3 else None


_AUTH_US: Final = "gatehouse.latency.auth_us"
_PUBLIC_LIMITS_US: Final = "gatehouse.latency.public_limits_us"
_RATE_LIMIT_START: Final = "gatehouse.latency.rate_limit_start"
_RATE_LIMIT_END: Final = "gatehouse.latency.rate_limit_end"
"""Filter-state keys the translator's latency stamps write (control_plane/translator/latency_stamps.py)."""


def _stamp(states: Any, key: str) -> float | None:
    """One stamp's number: Envoy sends each as a packed ``google.protobuf.StringValue``,
    whose bytes are read directly (field 1, a short length, the text): a third of the cost
    of ``Any.Unpack`` here, once per stamp per entry."""
    packed = states.get(key)
    if packed is None:
        return None
    raw = packed.value
    if len(raw) < 2 or raw[0] != 0x0A or raw[1] != len(raw) - 2:
        value = wrappers_pb2.StringValue()
        if not packed.Unpack(value):
            return None
        raw = value.value.encode()
    else:
        raw = raw[2:]
    try:
        return float(raw)
    except ValueError:
        return None


def _check_latencies(common: Any, total_ms: float | None) -> tuple[float | None, float | None]:
    """(auth, rate_limit) in ms from the stamps; (None, None) when there are none.

    A request the ratelimit filter refused (429, flag ``RL``) has no end stamp: its stage
    ends with the response, so it runs to the request's start plus ``total``."""
    states = common.filter_state_objects
    if not states:
        return None, None
    auth_us = _stamp(states, _AUTH_US)
    auth = round(auth_us / 1000, 3) if auth_us is not None else None
    limits_us = _stamp(states, _PUBLIC_LIMITS_US)
    if limits_us is not None:
        return auth, round(limits_us / 1000, 3)
    start, end = _stamp(states, _RATE_LIMIT_START), _stamp(states, _RATE_LIMIT_END)
    if end is None and start is not None and total_ms is not None and common.response_flags.rate_limited:
        began = common.start_time
        end = began.seconds + began.nanos / 1e9 + total_ms / 1000
    rate_limit = round(max(0.0, end - start) * 1000, 3) if start is not None and end is not None else None
    return auth, rate_limit


def _int_or_none(text: str | None) -> int | None:
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def access_event_dict(entry: accesslog_pb2.HTTPAccessLogEntry) -> dict[str, Any]:
    """The event as a dict (tests and the file sink's readers use the same keys)."""
    common = entry.common_properties
    request = entry.request
    response = entry.response
    request_headers = request.request_headers
    start = common.start_time
    has = common.HasField

    upstream_ms: float | None = None
    if has("time_to_last_upstream_rx_byte"):
        last, first = common.time_to_last_upstream_rx_byte, common.time_to_first_upstream_tx_byte
        upstream_ms = round(((last.seconds - first.seconds) * 1_000_000_000 + last.nanos - first.nanos) / 1e6, 3)
    total_ms: float | None = None
    if has("time_to_last_downstream_tx_byte"):
        total = common.time_to_last_downstream_tx_byte
        total_ms = round((total.seconds * 1_000_000_000 + total.nanos) / 1e6, 3)
    elif has("duration"):
        total = common.duration
        total_ms = round((total.seconds * 1_000_000_000 + total.nanos) / 1e6, 3)

    auth_ms, rate_limit_ms = _check_latencies(common, total_ms)

    upstream = common.upstream_remote_address.socket_address
    upstream_address = upstream.address
    flags = common.response_flags
    remaining = response.response_headers.get("x-ratelimit-remaining")
    return {
        "schema_version": SCHEMA_VERSION,
        "type": ACCESS_TYPE,
        "timestamp": _TIME.format(start.seconds, start.nanos),
        "request_id": request.request_id or None,
        "trace_id": _trace_id(request_headers),
        "method": _METHODS.get(request.request_method),
        "path": request.path or None,
        "status": response.response_code.value if response.HasField("response_code") else None,
        "user_id": request_headers.get(USER_ID_HEADER) or None,
        "client_ip": common.downstream_remote_address.socket_address.address or None,
        "user_agent": request.user_agent or None,
        "route": common.route_name or None,
        "upstream_cluster": common.upstream_cluster or None,
        "upstream_host": f"{upstream_address}:{upstream.port_value}" if upstream_address else None,
        "latency_ms": {"total": total_ms, "upstream": upstream_ms, "auth": auth_ms, "rate_limit": rate_limit_ms},
        "request_bytes": request.request_body_bytes,
        "response_bytes": response.response_body_bytes,
        "response_flags": short_codes(flags) if flags.ByteSize() else [],
        "rate_limit_remaining": _int_or_none(remaining) if remaining else None,
    }


def encode_access_event(entry: accesslog_pb2.HTTPAccessLogEntry) -> bytes:
    """The event as compact JSON bytes, ready for a Kafka record or a JSON line."""
    return _encode(access_event_dict(entry)).encode()
