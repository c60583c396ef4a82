"""A service's own spans (ext_authz's check, ratelimit_svc's decision) → OTLP/gRPC.

Deliberately not the OpenTelemetry SDK: one span kind, no context API, and the request
path's share is one ``record`` call (a tuple into a bounded deque, ~1 µs); building the
protobuf and the export happen in a background task on the service's event loop, in
batches, each with a timeout. With tracing off (no ``tracing:`` in the service's
config) there is no exporter and the handlers skip the call: no per-request work.

Failure policy: spans are best effort. A full queue drops the new span
(``gatehouse_tracing_spans_dropped_total{reason="queue_full"}``); a failed or timed-out
export drops its batch (``reason="export_failed"``) and the next batch is tried at the
next interval; nothing waits for the collector on the request path.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import deque
from typing import Annotated

import grpc
import structlog
from prometheus_client import Counter
from pydantic import Field

from servicekit.config_file import HostPort
from servicekit.durations import Duration, Millis
from servicekit.model import Model
from servicekit.protos.gatehouse.otlp.v1 import trace_pb2
from servicekit.trace_context import parse_traceparent

log = structlog.get_logger(component="tracing")

SPANS_EXPORTED = Counter("gatehouse_tracing_spans_exported_total", "Spans the OTLP collector accepted")
SPANS_DROPPED = Counter("gatehouse_tracing_spans_dropped_total", "Spans not delivered", ["reason"])
# OTLP's method; the messages are the project's own copy (protos/gatehouse/otlp/v1/trace.proto).
EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
_SERVER = trace_pb2.Span.SpanKind.SPAN_KIND_SERVER
_ERROR = trace_pb2.Status.StatusCode.STATUS_CODE_ERROR

Attributes = tuple[tuple[str, str | int], ...]
_Span = tuple[bytes, bytes, str, int, int, Attributes, bool]


class SpanExport(Model):
    """``tracing:`` in ext_authz's and ratelimit_svc's config (docs/tracing.md)."""

    otlp_address: HostPort
    """The collector's OTLP/gRPC receiver (``host:port``), the one Envoy reports to."""
    service_name: Annotated[str, Field(min_length=1, max_length=128)]
    queue_size: Annotated[int, Field(ge=1, le=1_000_000)] = 4096
    """Spans held for export at most; beyond it new spans are dropped and counted."""
    batch_size: Annotated[int, Field(ge=1, le=10_000)] = 512
    interval: Duration = Millis(1000)
    """How often the queue is exported (sooner when a batch is full)."""
    timeout: Duration = Millis(1000)
    """One export's deadline."""


class SpanExporter:
    def __init__(self, config: SpanExport) -> None:
        self._config = config
        self._queue: deque[_Span] = deque()
        self._full = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._channel: grpc.aio.Channel | None = None
        self._call: grpc.aio.UnaryUnaryMultiCallable[
            trace_pb2.ExportTraceServiceRequest, trace_pb2.ExportTraceServiceResponse
        ] | None = None
        self._failing = False
        self._attributes: dict[tuple[str, str | int], trace_pb2.KeyValue] = {}
        self._resource = trace_pb2.KeyValue(key="service.name", value=trace_pb2.AnyValue(string_value=config.service_name))
        self._queue_full = SPANS_DROPPED.labels("queue_full")
        self._export_failed = SPANS_DROPPED.labels("export_failed")

    def record(self, traceparent: str | None, name: str, start_ns: int, end_ns: int, attributes: Attributes,
               error: bool = False) -> None:
        """One finished span, child of the caller's span; nothing when the call was not traced."""
        parent = parse_traceparent(traceparent)
        if parent is None or not parent.sampled:
            return
        queue = self._queue
        if len(queue) >= self._config.queue_size:
            self._queue_full.inc()
            return
        queue.append((parent.trace_id, parent.span_id, name, start_ns, end_ns, attributes, error))
        if len(queue) >= self._config.batch_size:
            self._full.set()

    def start(self) -> None:
        self._channel = grpc.aio.insecure_channel(self._config.otlp_address)
        self._task = asyncio.create_task(self._run(), name="span-export")

    async def stop(self) -> None:
        """Export what is queued (one try, within the timeout), then close."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(Exception):
            await self._export_all()
        if self._channel is not None:
            await self._channel.close()

    async def _run(self) -> None:
        interval = self._config.interval / 1000
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._full.wait(), interval)
            self._full.clear()
            await self._export_all()

    async def _export_all(self) -> None:
        while self._queue:
            await self._export(self._take())

    def _take(self) -> list[_Span]:
        queue, batch = self._queue, []
        for _ in range(min(len(queue), self._config.batch_size)):
            batch.append(queue.popleft())
        return batch

    def request(self, batch: list[_Span]) -> trace_pb2.ExportTraceServiceRequest:
        request = trace_pb2.ExportTraceServiceRequest()
        resource_spans = request.resource_spans.add()
        resource_spans.resource.attributes.append(self._resource)
        spans = resource_spans.scope_spans.add()
        spans.scope.name = "gatehouse"
        add, attribute = spans.spans.add, self._attribute
        for trace_id, parent_id, name, start_ns, end_ns, attributes, error in batch:
            span = add(
                trace_id=trace_id, span_id=random.getrandbits(64).to_bytes(8, "big"), parent_span_id=parent_id,
                name=name, kind=_SERVER, start_time_unix_nano=start_ns, end_time_unix_nano=end_ns,
                attributes=[attribute(item) for item in attributes],
            )
            if error:
                span.status.code = _ERROR
        return request

    def _attribute(self, item: tuple[str, str | int]) -> trace_pb2.KeyValue:
        """One attribute's message, built once: routes, decisions and codes repeat."""
        cached = self._attributes.get(item)
        if cached is None:
            if len(self._attributes) >= 4096:
                self._attributes.clear()
            key, value = item
            any_value = trace_pb2.AnyValue(int_value=value) if isinstance(value, int) else trace_pb2.AnyValue(string_value=value)
            cached = self._attributes[item] = trace_pb2.KeyValue(key=key, value=any_value)
        return cached

    async def _export(self, batch: list[_Span]) -> None:
        assert self._channel is not None
        if self._call is None:
            self._call = self._channel.unary_unary(
                EXPORT_METHOD,
                request_serializer=trace_pb2.ExportTraceServiceRequest.SerializeToString,
                response_deserializer=trace_pb2.ExportTraceServiceResponse.FromString,
            )
        try:
            await self._call(self.request(batch), timeout=self._config.timeout / 1000)
        except (grpc.RpcError, TimeoutError) as exc:
            self._export_failed.inc(len(batch))
            if not self._failing:  # once per outage, not once per batch
                code = exc.code() if isinstance(exc, grpc.aio.AioRpcError) else "timeout"
                log.warning("span_export_failed", spans=len(batch), reason=str(code), detail="spans dropped until it recovers")
            self._failing = True
            return
        if self._failing:
            log.info("span_export_recovered")
        self._failing = False
        SPANS_EXPORTED.inc(len(batch))
