"""Tracing and the access log's latency breakdown through real Envoy, ext_authz (HTTP),
ratelimit_svc, telemetry and an OTLP receiver (tests/harness/otlp_receiver.py)."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.ext_authz import ExtAuthzProcess
from tests.harness.gateway import GatewayStack
from tests.harness.issuer import TestIssuer
from tests.harness.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.harness.ratelimit import RateLimitServiceProcess
from tests.harness.redis import RedisServer
from tests.harness.route_repo import route_doc
from tests.harness.telemetry import TelemetryServiceProcess
from tests.integration.conftest import StackFactory, ext_authz_entry

GATEWAY_SERVICE = "test-gateway"
AUTHZ_SERVICE = "test-ext-authz"
RATELIMIT_SERVICE = "test-ratelimit"
ROUTES = [
    route_doc("orders", {"match": {"pathPrefix": "/orders"}, "backends": [{"service": "svc-a", "port": 8080}],
                         "rateLimits": [{"key": "user", "algorithm": "fixedWindow", "limit": 1000, "window": "60s"}]}),
    route_doc("open", {"match": {"pathPrefix": "/open"}, "backends": [{"service": "svc-b", "port": 8080}],
                       "auth": {"required": False},
                       "rateLimits": [{"key": "ip", "algorithm": "fixedWindow", "limit": 1000, "window": "60s"}]}),
]


class Stack:
    def __init__(self, gateway: GatewayStack, receiver: OtlpReceiver, access_file: Path, issuer: TestIssuer,
                 stops: list[Any]) -> None:
        self.gateway, self.receiver, self.access_file, self.issuer, self.stops = gateway, receiver, access_file, issuer, stops

    def events(self, path_prefix: str, expected: int, timeout: float = 20) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        found: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            if self.access_file.exists():
                lines = [json.loads(line) for line in self.access_file.read_text().splitlines() if line.strip()]
                found = [e for e in lines if str(e.get("path")).startswith(path_prefix)]
                if len(found) >= expected:
                    return found
            time.sleep(0.2)
        raise AssertionError(f"{len(found)} access events for {path_prefix}, expected {expected}")


def start(make_stack: StackFactory, tmp_path: Path, redis: RedisServer, *, sampling: float = 100,
          receiver: OtlpReceiver | None = None, transport: str = "http") -> Stack:
    issuer = TestIssuer()
    receiver = receiver or OtlpReceiver().start()
    access_file = tmp_path / "access.jsonl"
    telemetry = TelemetryServiceProcess(tmp_path / "telemetry", sink={"file": {"path": str(access_file)}}).start()
    export = {"otlpAddress": receiver.address, "interval": "200ms", "timeout": "500ms"}
    ratelimit = RateLimitServiceProcess(tmp_path / "rl", redis_url=redis.url,
                                        extra={"tracing": {**export, "serviceName": RATELIMIT_SERVICE}})
    jwks = str(issuer.write_jwks(tmp_path / "jwks.json"))
    authz = ExtAuthzProcess(
        tmp_path / "authz", {"issuers": [{"issuer": issuer.issuer, "audiences": [issuer.audience], "jwksFile": jwks}],
                             "tracing": {**export, "serviceName": AUTHZ_SERVICE}},
        transport=transport, rate_limit={"redis": {"url": redis.url, "timeout": "200ms"}} if transport == "http" else None,
    )
    gateway = make_stack(control_plane_extra={
        "extAuthz": {**ext_authz_entry([authz]), "publicRouteLimits": False},
        "rateLimit": {"address": ratelimit.address, "timeout": "200ms"},
        "accessLog": {"address": telemetry.address, "bufferSize": 0, "flushInterval": "100ms"},
        "tracing": {"otlpAddress": receiver.address, "samplingPercent": sampling, "serviceName": GATEWAY_SERVICE},
    })
    gateway.commit_routes({"routes.yaml": ROUTES})
    gateway.start()
    ratelimit.start(gateway.control_plane.xds_port)
    authz.use_control_plane(gateway.control_plane.xds_port)
    authz.start()
    gateway.wait_status("/open/x", 200, timeout=30)
    return Stack(gateway, receiver, access_file, issuer, [telemetry, ratelimit, authz, receiver])


@pytest.fixture
def stack(make_stack: StackFactory, tmp_path: Path, redis: RedisServer) -> Iterator[Stack]:
    s = start(make_stack, tmp_path, redis)
    try:
        yield s
    finally:
        for service in s.stops:
            service.stop()


def traceparent() -> tuple[str, str, str]:
    trace_id, parent = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, parent, f"00-{trace_id}-{parent}-01"


def show(spans: list[ReceivedSpan]) -> str:
    return "\n".join(f"{s.service} {s.name} {s.span_id} <- {s.parent_span_id} {s.attributes}" for s in spans)


def ingress(spans: list[ReceivedSpan]) -> ReceivedSpan:
    [span] = [s for s in spans if s.name == "ingress"]
    return span


def egress(spans: list[ReceivedSpan], cluster: str) -> ReceivedSpan:
    [span] = [s for s in spans if s.attributes.get("upstream_cluster") == cluster and s.name != "ingress"]
    return span


def test_client_traceparent_continues_through_envoy_and_its_checks(stack: Stack) -> None:
    # Authenticated: the HTTP check decides auth and the limits in one call.
    trace_id, parent, header = traceparent()
    token = stack.issuer.token("alice")
    reply = stack.gateway.get("/orders/1", headers={"traceparent": header, "authorization": f"Bearer {token}"})
    assert reply.status == 200, reply
    spans = stack.receiver.wait_for(trace_id, count=3, services={GATEWAY_SERVICE, AUTHZ_SERVICE})
    root = ingress(spans)
    assert root.service == GATEWAY_SERVICE and root.parent_span_id == parent, show(spans)
    check = egress(spans, "gatehouse_ext_authz")
    assert check.parent_span_id == root.span_id and check.attributes["ext_authz_status"] == "ext_authz_ok", show(spans)
    assert root.start_ns <= check.start_ns and check.end_ns <= root.end_ns, show(spans)
    # ext_authz's own span is a child of Envoy's span for the call, and inside it.
    [service] = [s for s in spans if s.service == AUTHZ_SERVICE]
    assert service.parent_span_id == check.span_id, show(spans)
    assert service.attributes["gatehouse.route"] == "default/orders", show(spans)
    assert service.attributes["gatehouse.decision"] == "allow" and service.attributes["http.response.status_code"] == 200
    assert 0 < service.duration_ms <= check.duration_ms + 1, show(spans)  # clocks of one machine

    # Public, its limits at ratelimit_svc over gRPC; the upstream waits 200 ms.
    trace_id, parent, header = traceparent()
    assert stack.gateway.get("/open/x?delay=0.2", headers={"traceparent": header}).status == 200
    spans = stack.receiver.wait_for(trace_id, count=3, services={GATEWAY_SERVICE, RATELIMIT_SERVICE})
    root = ingress(spans)
    assert root.parent_span_id == parent and root.duration_ms >= 200, show(spans)
    limit = egress(spans, "gatehouse_ratelimit")
    assert limit.parent_span_id == root.span_id, show(spans)
    [decision] = [s for s in spans if s.service == RATELIMIT_SERVICE]
    assert decision.parent_span_id == limit.span_id, show(spans)
    assert decision.attributes["gatehouse.route"] == "default/open" and decision.attributes["gatehouse.decision"] == "ok"
    assert not [s for s in spans if s.service == AUTHZ_SERVICE], show(spans)  # a public route: no check

    [orders] = stack.events("/orders/1", 1)
    [open_] = stack.events("/open/x?delay", 1)
    assert open_["trace_id"] == trace_id
    latency = orders["latency_ms"]
    assert 0 < latency["auth"] < latency["total"], orders
    assert latency["upstream"] < latency["total"], orders
    latency = open_["latency_ms"]
    assert latency["auth"] is None, open_  # public: no check
    assert latency["upstream"] >= 200 and latency["total"] >= latency["upstream"], open_
    # The gRPC call's span and the stamps measure the same stage; the stamps add a few µs of filters.
    assert 0 < latency["rate_limit"] < 100 and latency["rate_limit"] + 0.5 >= limit.duration_ms * 0.5, (open_, limit)


def test_grpc_ext_authz_continues_the_trace_from_the_call_metadata(make_stack: StackFactory, tmp_path: Path,
                                                                   redis: RedisServer) -> None:
    """Over gRPC, Envoy puts traceparent in the call's metadata; the route's limits are a
    second call, to ratelimit_svc: both services' spans hang under Envoy's two egress spans."""
    s = start(make_stack, tmp_path, redis, transport="grpc")
    try:
        trace_id, parent, header = traceparent()
        token = s.issuer.token("alice")
        reply = s.gateway.get("/orders/2", headers={"traceparent": header, "authorization": f"Bearer {token}"})
        assert reply.status == 200, reply
        spans = s.receiver.wait_for(trace_id, count=5, services={GATEWAY_SERVICE, AUTHZ_SERVICE, RATELIMIT_SERVICE})
        root = ingress(spans)
        assert root.parent_span_id == parent, show(spans)
        check, limit = egress(spans, "gatehouse_ext_authz"), egress(spans, "gatehouse_ratelimit")
        assert check.parent_span_id == root.span_id and limit.parent_span_id == root.span_id, show(spans)
        [authz] = [x for x in spans if x.service == AUTHZ_SERVICE]
        [decision] = [x for x in spans if x.service == RATELIMIT_SERVICE]
        assert authz.parent_span_id == check.span_id and authz.attributes["gatehouse.route"] == "default/orders", show(spans)
        assert authz.attributes["gatehouse.decision"] == "allow", show(spans)
        assert decision.parent_span_id == limit.span_id and decision.attributes["gatehouse.route"] == "default/orders", show(spans)
        [event] = s.events("/orders/2", 1)
        latency = event["latency_ms"]
        assert event["trace_id"] == trace_id
        assert 0 < latency["auth"] < latency["total"] and 0 < latency["rate_limit"] < latency["total"], event
    finally:
        for service in s.stops:
            service.stop()


def test_a_request_without_traceparent_starts_a_trace(stack: Stack) -> None:
    assert stack.gateway.get("/open/new").status == 200
    [event] = stack.events("/open/new", 1)
    trace_id = event["trace_id"]
    assert trace_id and len(trace_id) == 32, event
    spans = stack.receiver.wait_for(trace_id, count=2)
    assert ingress(spans).parent_span_id == "", show(spans)


def test_collector_down_neither_fails_nor_slows_requests(make_stack: StackFactory, tmp_path: Path,
                                                          redis: RedisServer) -> None:
    receiver = OtlpReceiver()  # never started: nothing listens on its port
    s = start(make_stack, tmp_path, redis, receiver=receiver)
    try:
        client = s.gateway.client()
        slowest = 0.0
        token = s.issuer.token("alice")
        for i in range(50):
            began = time.monotonic()
            path, headers = (f"/open/down{i}", {}) if i % 2 else (f"/orders/down{i}", {"authorization": f"Bearer {token}"})
            reply = client.request(path, headers={"traceparent": traceparent()[2], **headers})
            slowest = max(slowest, time.monotonic() - began)
            assert reply.status == 200, reply
        client.close()
        assert slowest < 0.5, slowest  # an export waits up to its timeout, but never on the request path
        # Envoy exports every 5 s; a failed export shows in the collector cluster's stats
        # (its tracer counts spans it handed to the gRPC client as sent).
        deadline = time.monotonic() + 20
        failed = 0
        assert s.gateway.envoy is not None
        while time.monotonic() < deadline and not failed:
            failed = s.gateway.envoy.stats("gatehouse_otlp").get("cluster.gatehouse_otlp.upstream_cx_connect_fail", 0)
            time.sleep(0.5)
        assert failed >= 1, s.gateway.envoy.stats("gatehouse_otlp")
        # ext_authz and ratelimit_svc drop their spans and count them, after one export each.
        _, ratelimit, authz, _ = s.stops
        dropped = "gatehouse_tracing_spans_dropped_total"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (authz.metric(dropped, reason="export_failed") >= 25
                                                   and ratelimit.metric(dropped, reason="export_failed") >= 25):
            time.sleep(0.2)
        assert authz.metric(dropped, reason="export_failed") >= 25
        assert ratelimit.metric(dropped, reason="export_failed") >= 25
        assert authz.metric("gatehouse_tracing_spans_exported_total") == 0
    finally:
        for service in s.stops:
            service.stop()


def test_sampling_zero_sends_nothing(make_stack: StackFactory, tmp_path: Path, redis: RedisServer) -> None:
    s = start(make_stack, tmp_path, redis, sampling=0)
    try:
        for i in range(20):
            assert s.gateway.get(f"/open/unsampled{i}").status == 200
        events = s.events("/open/unsampled", 20)
        time.sleep(6)  # longer than Envoy's 5 s export interval
        ids = {e["trace_id"] for e in events}
        assert not [span for span in s.receiver.snapshot() if span.trace_id in ids], s.receiver.snapshot()[:5]
        assert s.receiver.exports == 0 or not s.receiver.snapshot(), s.receiver.snapshot()[:5]
    finally:
        for service in s.stops:
            service.stop()
