"""HTTPAccessLogEntry → access event: every field, absent fields as null, and the CPU cost."""

from __future__ import annotations

import json
import time

from envoy.data.accesslog.v3 import accesslog_pb2

from telemetry.access_event import SCHEMA_VERSION, access_event_dict, encode_access_event
from telemetry.response_flags import CODES, short_codes
from tests.unit.telemetry.entries import TRACE_ID, full_entry, stamp


def test_full_entry_maps_every_field() -> None:
    event = json.loads(encode_access_event(full_entry()))
    assert event == {
        "schema_version": SCHEMA_VERSION,
        "type": "access",
        "timestamp": "2026-01-01T00:00:00.123Z",
        "request_id": "5f1c1f2e-0a9e-4f6b-9c9d-2b3c4d5e6f70",
        "trace_id": TRACE_ID,
        "method": "GET",
        "path": "/api/v2/orders/42?x=1",
        "status": 200,
        "user_id": "alice",
        "client_ip": "203.0.113.7",
        "user_agent": "curl/8.5",
        "route": "shop/orders",
        "upstream_cluster": "shop/orders/order-service:8080",
        "upstream_host": "10.0.0.12:8080",
        "latency_ms": {"total": 14.25, "upstream": 12.5, "auth": 0.412, "rate_limit": 0.35},
        "request_bytes": 0,
        "response_bytes": 512,
        "response_flags": ["URX"],
        "rate_limit_remaining": 99,
    }


def test_output_is_compact_json_bytes() -> None:
    raw = encode_access_event(full_entry())
    assert isinstance(raw, bytes)
    assert b": " not in raw and b", " not in raw and b"\n" not in raw


def test_empty_entry_gives_nulls_not_errors() -> None:
    event = access_event_dict(accesslog_pb2.HTTPAccessLogEntry())
    assert event["timestamp"] == "1970-01-01T00:00:00.000Z"
    for key in ("request_id", "trace_id", "method", "path", "status", "user_id", "client_ip", "user_agent",
                "route", "upstream_cluster", "upstream_host", "rate_limit_remaining"):
        assert event[key] is None, key
    assert event["latency_ms"] == {"total": None, "upstream": None, "auth": None, "rate_limit": None}
    assert event["response_flags"] == []


def test_local_reply_has_no_upstream_and_uses_duration() -> None:
    entry = full_entry()
    common = entry.common_properties
    for name in ("upstream_remote_address", "time_to_first_upstream_tx_byte", "time_to_last_upstream_rx_byte",
                 "time_to_last_downstream_tx_byte", "response_flags"):
        common.ClearField(name)
    common.upstream_cluster = ""
    common.duration.nanos = 300_000
    common.response_flags.rate_limited = True
    # Refused by the ratelimit filter: no end stamp; the stage ends with the response.
    del common.filter_state_objects["gatehouse.latency.rate_limit_end"]
    stamp(entry, "gatehouse.latency.rate_limit_start", "1767225600.123500")
    entry.response.response_code.value = 429
    entry.response.response_headers["x-ratelimit-remaining"] = "0"
    event = access_event_dict(entry)
    assert event["upstream_host"] is None and event["upstream_cluster"] is None
    assert event["latency_ms"] == {"total": 0.3, "upstream": None, "auth": 0.412, "rate_limit": 0.257}
    assert event["response_flags"] == ["RL"]
    assert event["rate_limit_remaining"] == 0


def test_public_route_limits_check_is_the_rate_limit_time() -> None:
    """A public route's limits decided by the lean check: Envoy's own latency of that call."""
    entry = full_entry()
    del entry.common_properties.filter_state_objects["gatehouse.latency.auth_us"]
    stamp(entry, "gatehouse.latency.public_limits_us", "275")
    assert access_event_dict(entry)["latency_ms"]["auth"] is None
    assert access_event_dict(entry)["latency_ms"]["rate_limit"] == 0.275


def test_refused_by_the_check_has_auth_but_no_rate_limit() -> None:
    """A 401 stops the chain at ext_authz: the stamp after the ratelimit filter never comes."""
    entry = full_entry()
    del entry.common_properties.filter_state_objects["gatehouse.latency.rate_limit_end"]
    assert access_event_dict(entry)["latency_ms"]["auth"] == 0.412
    assert access_event_dict(entry)["latency_ms"]["rate_limit"] is None


def test_malformed_stamps_are_null() -> None:
    entry = full_entry()
    stamp(entry, "gatehouse.latency.auth_us", "-")
    entry.common_properties.filter_state_objects["gatehouse.latency.rate_limit_end"].Pack(
        accesslog_pb2.HTTPAccessLogEntry()
    )
    latency = access_event_dict(entry)["latency_ms"]
    assert latency["auth"] is None and latency["rate_limit"] is None


def test_b3_trace_id_when_no_traceparent() -> None:
    entry = full_entry()
    del entry.request.request_headers["traceparent"]
    entry.request.request_headers["x-b3-traceid"] = "80f198ee56343ba864fe8b2a57d3eff7"
    assert access_event_dict(entry)["trace_id"] == "80f198ee56343ba864fe8b2a57d3eff7"


def test_malformed_traceparent_falls_back() -> None:
    entry = full_entry()
    entry.request.request_headers["traceparent"] = "garbage"
    assert access_event_dict(entry)["trace_id"] is None


def test_non_numeric_remaining_is_null() -> None:
    entry = full_entry()
    entry.response.response_headers["x-ratelimit-remaining"] = "lots"
    assert access_event_dict(entry)["rate_limit_remaining"] is None


def test_every_response_flag_has_a_short_code() -> None:
    names = [f.name for f in accesslog_pb2.ResponseFlags.DESCRIPTOR.fields]
    assert sorted(names) == sorted(CODES)
    flags = accesslog_pb2.ResponseFlags(no_healthy_upstream=True, upstream_connection_failure=True)
    flags.unauthorized_details.reason = accesslog_pb2.ResponseFlags.Unauthorized.EXTERNAL_SERVICE
    assert short_codes(flags) == ["UH", "UF", "UAEX"]


def test_timestamp_cache_follows_the_second() -> None:
    entry = full_entry()
    first = access_event_dict(entry)["timestamp"]
    entry.common_properties.start_time.seconds += 61
    entry.common_properties.start_time.nanos = 5_000_000
    assert first == "2026-01-01T00:00:00.123Z"
    assert access_event_dict(entry)["timestamp"] == "2026-01-01T00:01:01.005Z"


def test_cost_per_entry_micro_benchmark() -> None:
    """Prints µs/entry (run with -s); the bound is loose so a slow CI box does not flake."""
    entries = [full_entry() for _ in range(100)]
    for entry in entries:
        encode_access_event(entry)
    rounds = 200
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(rounds):
            for entry in entries:
                encode_access_event(entry)
        best = min(best, (time.perf_counter() - start) / (rounds * len(entries)))
    print(f"\naccess_event: {best * 1e6:.2f} µs/entry")
    assert best < 100e-6
