"""Where access events go: Kafka, a JSON-lines file, or stdout. One small interface.

``AccessLogPipeline`` drains the ``EventBuffer`` in batches into an ``EventWriter``. A
writer counts what it delivered; a batch it could not take is dropped and counted
(``reason="sink_error"``), never retried: access events are best effort, by design.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import IO, Any, Protocol

import structlog

from telemetry import metrics
from telemetry.buffer import EventBuffer
from servicekit.kafka import Producer, ProducerFactory, stop_quietly, kafka_error

log = structlog.get_logger(component="telemetry")


class EventWriter(Protocol):
    async def start(self) -> None: ...

    async def write(self, batch: list[bytes]) -> None:
        """Deliver (or hand over) a batch; count it; raise only for a batch wholly lost."""
        ...

    async def close(self) -> None: ...

    @property
    def healthy(self) -> bool: ...


class AccessLogPipeline:
    def __init__(self, buffer: EventBuffer, writer: EventWriter, *, batch_size: int = 500) -> None:
        self.buffer = buffer
        self.writer = writer
        self.batch_size = batch_size

    async def run(self) -> None:
        """Drain until cancelled; on cancellation flush what is buffered (bounded by the writer's timeouts)."""
        try:
            while True:
                await self.buffer.wait()
                await self._write(self.buffer.take(self.batch_size))
        except asyncio.CancelledError:
            while len(self.buffer):
                batch = self.buffer.take(self.batch_size)
                if self.writer.healthy:
                    await self._write(batch)
                else:
                    metrics.DROP_SINK_ERROR.inc(len(batch))
            raise

    async def _write(self, batch: list[bytes]) -> None:
        try:
            await self.writer.write(batch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any sink failure drops (and counts) the batch, never the stream
            metrics.DROP_SINK_ERROR.inc(len(batch))
            log.warning("access_batch_dropped", events=len(batch), error=repr(exc))


class KafkaAccessWriter:
    """Hands records to aiokafka without awaiting each ack; acks and failures are counted in callbacks.

    ``send`` only waits for room in aiokafka's accumulator, and at most ``send_timeout``.
    While Kafka is unreachable the drain stalls on that wait, the buffer fills, and new
    events are dropped as ``buffer_full``; records already handed over fail after
    ``request_timeout_ms`` and count as ``sink_error``.
    """

    def __init__(self, factory: ProducerFactory, *, topic: str, send_timeout: float, retry_backoff: float = 1.0) -> None:
        self._factory = factory
        self._topic = topic
        self._send_timeout = send_timeout
        self._retry_backoff = retry_backoff
        self._producer: Producer | None = None
        self._failed = False

    @property
    def healthy(self) -> bool:
        return self._producer is not None and not self._failed

    async def start(self) -> None:
        await self._ensure_producer()

    async def _ensure_producer(self) -> Producer | None:
        if self._producer is not None:
            return self._producer
        producer = self._factory()
        try:
            await asyncio.wait_for(producer.start(), self._send_timeout)
        except (Exception, asyncio.TimeoutError) as exc:  # noqa: BLE001 - any producer failure means Kafka is unavailable
            kafka_error("access", exc)
            log.warning("kafka_unavailable", sink="access", error=repr(exc))
            await stop_quietly(producer, self._send_timeout)
            self._failed = True
            return None
        self._producer = producer
        self._failed = False
        return producer

    async def write(self, batch: list[bytes]) -> None:
        producer = await self._ensure_producer()
        if producer is None:
            metrics.DROP_SINK_ERROR.inc(len(batch))
            await asyncio.sleep(self._retry_backoff)  # the buffer absorbs (then drops) meanwhile
            return
        topic, delivered, index = self._topic, self._delivered, 0
        try:
            # One deadline for the batch: a wait_for per record cost more than the send itself.
            async with asyncio.timeout(self._send_timeout):
                for index, record in enumerate(batch):
                    future = await producer.send(topic, record)
                    future.add_done_callback(delivered)
                index = len(batch)
        except (Exception, asyncio.TimeoutError) as exc:  # noqa: BLE001 - any producer failure drops (and counts) the rest
            kafka_error("access", exc)
            metrics.DROP_SINK_ERROR.inc(len(batch) - index)
            self._failed = True

    def _delivered(self, future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            metrics.DROP_SINK_ERROR.inc()
            return
        exc = future.exception()
        if exc is None:
            metrics.ACCESS_SENT.inc()
            self._failed = False
        else:
            metrics.DROP_SINK_ERROR.inc()
            kafka_error("access", exc)
            self._failed = True

    async def close(self) -> None:
        if self._producer is not None:
            await stop_quietly(self._producer, self._send_timeout)  # flushes what aiokafka holds
            self._producer = None


class LinesWriter:
    """JSON lines to a stream opened by ``open_stream``; the blocking write runs in a thread."""

    def __init__(self, stream: IO[bytes], *, close_stream: bool) -> None:
        self._stream = stream
        self._close_stream = close_stream
        self._ok = True

    @classmethod
    def to_file(cls, path: Path) -> LinesWriter:
        path.parent.mkdir(parents=True, exist_ok=True)
        return cls(path.open("ab"), close_stream=True)

    @classmethod
    def to_stdout(cls) -> LinesWriter:
        return cls(sys.stdout.buffer, close_stream=False)

    @property
    def healthy(self) -> bool:
        return self._ok

    async def start(self) -> None:
        return None

    async def write(self, batch: list[bytes]) -> None:
        data = b"\n".join(batch) + b"\n"
        try:
            await asyncio.to_thread(self._write, data)
        except OSError:
            self._ok = False
            raise
        self._ok = True
        metrics.ACCESS_SENT.inc(len(batch))

    def _write(self, data: bytes) -> None:
        self._stream.write(data)
        self._stream.flush()

    async def close(self) -> None:
        if self._close_stream:
            await asyncio.to_thread(self._stream.close)
