"""A real OTLP/gRPC trace receiver for the tests: ``TraceService/Export`` on loopback.

Not the OpenTelemetry Collector: building it from its Go module (hundreds of modules,
several minutes of a 2-core machine and most of CI's setup budget) costs more than the
tests gain. This speaks the same protocol (OTLP's ``TraceService/Export`` over grpcio,
with the project's copy of the OTLP messages, protos/gatehouse/otlp/v1), keeps every
span it receives, and can be stopped and restarted on the same port to play a collector
that is down.
"""

from __future__ import annotations

import threading
import time
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc

from servicekit.protos.gatehouse.otlp.v1 import trace_pb2
from tests.harness.ports import free_port

# OTLP's service; its messages are ours (their full names differ, the bytes do not).
_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


class _Service:
    def __init__(self, receiver: OtlpReceiver) -> None:
        self.receiver = receiver

    def export(self, request: Any, context: Any) -> Any:
        spans = []
        for resource_spans in request.resource_spans:
            attributes = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            service = str(attributes.get("service.name", ""))
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append(ReceivedSpan(
                        service=service, name=span.name, trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(), kind=span.kind,
                        start_ns=span.start_time_unix_nano, end_ns=span.end_time_unix_nano,
                        attributes={a.key: _value(a.value) for a in span.attributes},
                    ))
        with self.receiver.lock:
            self.receiver.spans.extend(spans)
            self.receiver.exports += 1
        return trace_pb2.ExportTraceServiceResponse()

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(_SERVICE, {
            "Export": grpc.unary_unary_rpc_method_handler(
                self.export,
                request_deserializer=trace_pb2.ExportTraceServiceRequest.FromString,
                response_serializer=trace_pb2.ExportTraceServiceResponse.SerializeToString,
            ),
        })


class OtlpReceiver:
    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.lock = threading.Lock()
        self.spans: list[ReceivedSpan] = []
        self.exports = 0
        self._server: grpc.Server | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> OtlpReceiver:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        server.add_generic_rpc_handlers((_Service(self).handler(),))
        server.add_insecure_port(self.address)
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=0).wait(5)
            self._server = None

    def snapshot(self) -> list[ReceivedSpan]:
        with self.lock:
            return list(self.spans)

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        return [s for s in self.snapshot() if s.trace_id == trace_id]

    def wait_for(self, trace_id: str, *, services: set[str] | None = None, count: int = 1,
                 timeout: float = 20.0) -> list[ReceivedSpan]:
        """The trace's spans once ``count`` arrived (and one from each of ``services``)."""
        deadline = time.monotonic() + timeout
        spans: list[ReceivedSpan] = []
        while time.monotonic() < deadline:
            spans = self.trace(trace_id)
            if len(spans) >= count and (services is None or services <= {s.service for s in spans}):
                return spans
            time.sleep(0.1)
        raise AssertionError(f"trace {trace_id}: {len(spans)} spans after {timeout}s, from {sorted({s.service for s in spans})}: "
                             f"{[(s.service, s.name) for s in spans]}")
