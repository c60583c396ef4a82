"""``envoy.service.accesslog.v3.AccessLogService``: Envoy's ``http_grpc`` access logger streams here.

The first message of a stream carries the ``identifier`` (Envoy's node and log name);
each message carries ``http_logs.log_entry``. Every entry becomes one event offered to the
bounded buffer; the handler never awaits a sink. Before that, the route breakers' tallies
(``breaker_tallies.py``) see every entry, also those the full buffer then drops.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import structlog
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc

from telemetry import metrics
from telemetry.access_event import encode_access_event
from telemetry.breaker_tallies import BreakerTallies
from telemetry.buffer import EventBuffer

log = structlog.get_logger(component="telemetry")


class AccessLogService(als_pb2_grpc.AccessLogServiceServicer):  # type: ignore[misc]
    def __init__(self, buffer: EventBuffer, tallies: BreakerTallies | None = None) -> None:
        self._buffer = buffer
        self._tallies = tallies
        self.streams = 0

    async def StreamAccessLogs(  # noqa: N802 (gRPC method name)
        self, request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]
    ) -> als_pb2.StreamAccessLogsResponse:
        self.streams += 1
        buffer = self._buffer
        offer, received, invalid = buffer.offer, metrics.ACCESS_RECEIVED, metrics.DROP_INVALID
        tallies = self._tallies
        try:
            async for message in request_iterator:
                if message.HasField("identifier"):
                    node = message.identifier.node
                    log.info("als_stream", node=node.id, cluster=node.cluster, log_name=message.identifier.log_name)
                entries = message.http_logs.log_entry
                received.inc(len(entries))
                if tallies is not None and tallies.rules:
                    for entry in entries:  # ahead of the buffer: its drops must not starve the breakers
                        try:
                            tallies.observe(entry)
                        except Exception as exc:  # noqa: BLE001 - one odd entry costs its tally, never the stream
                            log.warning("breaker_entry_invalid", error=repr(exc))
                for position, entry in enumerate(entries):
                    if buffer.full:  # don't encode what would be dropped
                        buffer.drop(len(entries) - position)
                        break
                    try:
                        event = encode_access_event(entry)
                    except Exception as exc:  # a malformed entry costs one event, never the stream  # noqa: BLE001 - see the comment
                        invalid.inc()
                        log.warning("access_entry_invalid", error=repr(exc))
                        continue
                    offer(event)
        finally:
            self.streams -= 1
        return als_pb2.StreamAccessLogsResponse()
