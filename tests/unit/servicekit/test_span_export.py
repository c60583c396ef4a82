"""traceparent parsing and the span exporter's queue (no network: the export is tested
against a real OTLP receiver in tests/integration/test_tracing_envoy.py)."""

from __future__ import annotations

import asyncio

import pytest

from servicekit.span_export import SPANS_DROPPED, SpanExport, SpanExporter
from servicekit.trace_context import parse_traceparent

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


def test_a_valid_traceparent() -> None:
    parsed = parse_traceparent(f"00-{TRACE}-{PARENT}-01")
    assert parsed is not None
    assert parsed.trace_id.hex() == TRACE and parsed.span_id.hex() == PARENT and parsed.sampled
    unsampled = parse_traceparent(f"00-{TRACE}-{PARENT}-00")
    assert unsampled is not None and not unsampled.sampled
    # A later version may append fields.
    assert parse_traceparent(f"01-{TRACE}-{PARENT}-01-extra") is not None


@pytest.mark.parametrize("value", [
    None, "", "garbage", f"00-{TRACE}-{PARENT}-01-extra", f"ff-{TRACE}-{PARENT}-01", f"00-{TRACE[:30]} 1-{PARENT}-01",
    f"00-{'0' * 32}-{PARENT}-01", f"00-{TRACE}-{'0' * 16}-01", f"00_{TRACE}-{PARENT}-01", f"00-{TRACE}-{PARENT}-0g",
])
def test_a_bad_traceparent_is_none(value: str | None) -> None:
    assert parse_traceparent(value) is None


def _exporter(**overrides: object) -> SpanExporter:
    return SpanExporter(SpanExport.model_validate({"otlpAddress": "127.0.0.1:1", "serviceName": "svc", **overrides}))


async def test_record_keeps_sampled_spans_and_builds_the_otlp_request() -> None:
    exporter = _exporter()
    exporter.record(f"00-{TRACE}-{PARENT}-01", "check", 1_000, 2_000, (("gatehouse.route", "shop/a"), ("code", 200)), error=True)
    exporter.record(f"00-{TRACE}-{PARENT}-00", "unsampled", 1, 2, ())
    exporter.record(None, "untraced", 1, 2, ())
    batch = exporter._take()
    assert len(batch) == 1
    request = exporter.request(batch)
    [resource_spans] = request.resource_spans
    assert resource_spans.resource.attributes[0].value.string_value == "svc"
    [span] = resource_spans.scope_spans[0].spans
    assert span.trace_id.hex() == TRACE and span.parent_span_id.hex() == PARENT and len(span.span_id) == 8
    assert (span.name, span.start_time_unix_nano, span.end_time_unix_nano) == ("check", 1_000, 2_000)
    assert {a.key: (a.value.string_value or a.value.int_value) for a in span.attributes} == {"gatehouse.route": "shop/a", "code": 200}
    assert span.status.code == span.status.STATUS_CODE_ERROR


async def test_a_full_queue_drops_new_spans_and_counts_them() -> None:
    exporter = _exporter(queueSize=3, batchSize=2)
    dropped = SPANS_DROPPED.labels("queue_full")
    before = dropped._value.get()
    for _ in range(5):
        exporter.record(f"00-{TRACE}-{PARENT}-01", "check", 1, 2, ())
    assert dropped._value.get() - before == 2
    assert len(exporter._take()) == 2 and len(exporter._take()) == 1 and exporter._take() == []


async def test_an_unreachable_collector_drops_the_batch_within_the_timeout() -> None:
    exporter = _exporter(timeout="200ms")
    failed = SPANS_DROPPED.labels("export_failed")
    before = failed._value.get()
    exporter.start()
    try:
        for _ in range(3):
            exporter.record(f"00-{TRACE}-{PARENT}-01", "check", 1, 2, ())
        began = asyncio.get_running_loop().time()
        await exporter._export_all()
        assert asyncio.get_running_loop().time() - began < 1.0
    finally:
        await exporter.stop()
    assert failed._value.get() - before == 3
