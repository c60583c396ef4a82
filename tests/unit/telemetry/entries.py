"""HTTPAccessLogEntry protos built by hand, the way Envoy's http_grpc logger fills them."""

from __future__ import annotations

from envoy.data.accesslog.v3 import accesslog_pb2
from google.protobuf import wrappers_pb2

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def full_entry() -> accesslog_pb2.HTTPAccessLogEntry:
    entry = accesslog_pb2.HTTPAccessLogEntry()
    common = entry.common_properties
    common.start_time.seconds = 1_767_225_600  # 2026-01-01T00:00:00Z
    common.start_time.nanos = 123_456_789
    common.downstream_remote_address.socket_address.address = "203.0.113.7"
    common.downstream_remote_address.socket_address.port_value = 51000
    common.upstream_remote_address.socket_address.address = "10.0.0.12"
    common.upstream_remote_address.socket_address.port_value = 8080
    common.upstream_cluster = "shop/orders/order-service:8080"
    common.route_name = "shop/orders"
    common.time_to_first_upstream_tx_byte.nanos = 1_000_000
    common.time_to_last_upstream_rx_byte.nanos = 13_500_000
    common.time_to_last_downstream_tx_byte.nanos = 14_250_000
    common.response_flags.upstream_retry_limit_exceeded = True
    stamp(entry, "gatehouse.latency.auth_us", "412")
    stamp(entry, "gatehouse.latency.rate_limit_start", "1767225600.124000")
    stamp(entry, "gatehouse.latency.rate_limit_end", "1767225600.124350")
    entry.protocol_version = accesslog_pb2.HTTPAccessLogEntry.HTTP11
    request = entry.request
    request.request_method = 1  # GET
    request.path = "/api/v2/orders/42?x=1"
    request.authority = "api.example.com"
    request.user_agent = "curl/8.5"
    request.request_id = "5f1c1f2e-0a9e-4f6b-9c9d-2b3c4d5e6f70"
    request.request_body_bytes = 0
    request.request_headers["x-user-id"] = "alice"
    request.request_headers["traceparent"] = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
    entry.response.response_code.value = 200
    entry.response.response_body_bytes = 512
    entry.response.response_headers["x-ratelimit-remaining"] = "99"
    return entry


def stamp(entry: accesslog_pb2.HTTPAccessLogEntry, key: str, text: str) -> None:
    """A latency stamp as Envoy's ALS logger sends it: a packed StringValue."""
    entry.common_properties.filter_state_objects[key].Pack(wrappers_pb2.StringValue(value=text))
