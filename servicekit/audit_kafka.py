"""``KafkaAuditSink``: audit events to Kafka (acks=all, idempotent), spooled to disk while Kafka is away.

Two modes, switched only by the sink's own task (``_run``):

- **direct**: ``emit`` appends to an in-memory queue; the task sends batches and awaits
  their acks (bounded by ``ack_timeout``).
- **spooling**: ``emit`` appends to the spool file (fsync on the spool's thread). The task
  replays the spool from its acknowledged offset, in file order, batch by batch; once
  Kafka acknowledged everything up to the end of the file, the spool is truncated and
  the sink goes back to direct mode, in one step of the event loop (no ``await``
  between the check and the switch, so no event can slip between them).

A failed batch in direct mode moves that batch, then every queued event, to the spool:
order is kept. On ``start`` an existing spool is replayed before anything else. On
``stop`` every unacknowledged event goes to the spool. Delivery is at least once: a
batch whose ack was lost is sent again, so consumers dedupe by ``event_id``.

Losses, all counted in ``gatehouse_telemetry_audit_dropped_total``: the spool is at
``spool_max_bytes`` (``spool_full``), the disk write failed (``spool_error``), a
spooled line is not an event (``spool_corrupt``: damaged outside this code), or an event
came after ``stop`` (``closed``). A
SIGKILL loses only what was queued in memory and not yet acked (at most ``ack_timeout``
worth of events while Kafka is failing; nothing once the sink is spooling).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from typing import Any, Final

import structlog

from prometheus_client import Counter, Gauge

from servicekit.audit import AuditEvent
from servicekit.kafka import SCHEMA_VERSION, Producer, ProducerFactory, kafka_error, stop_quietly
from servicekit.spool import Spool

log = structlog.get_logger(component="telemetry")

AUDIT_SENT = Counter("gatehouse_telemetry_audit_sent_total", "Audit events acknowledged by Kafka")
AUDIT_SPOOLED = Counter("gatehouse_telemetry_audit_spooled_total", "Audit events written to the local spool")
AUDIT_REPLAYED = Counter("gatehouse_telemetry_audit_replayed_total", "Spooled audit events acknowledged by Kafka")
AUDIT_DROPPED = Counter("gatehouse_telemetry_audit_dropped_total", "Audit events lost", ["reason"])
"""The only losses: spool_full, spool_error, spool_corrupt, closed."""
AUDIT_SPOOL_BYTES = Gauge("gatehouse_telemetry_audit_spool_bytes", "Spool bytes not yet acknowledged by Kafka")
AUDIT_SPOOLING = Gauge("gatehouse_telemetry_audit_spooling", "1 while audit events go to the spool")

AUDIT_TYPE: Final = "audit"
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True).encode


Record = tuple[bytes, bytes]
"""(Kafka key, JSON value)."""


def audit_record(event: AuditEvent) -> Record:
    """(key, value) of an event: keyed by subject (or actor), so one subject's events keep their order."""
    body: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "type": AUDIT_TYPE, **event.as_dict()}
    key = event.subject or event.actor
    return key.encode(), _encode(body).encode()


def _from_spool(value: bytes) -> Record | None:
    """The spool holds values only (pure JSON lines); the key is derived again on replay.

    None for a line that is not an event object (a damaged spool): it is skipped and counted.
    """
    try:
        body = json.loads(value)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    key = body.get("subject") or body.get("actor") or ""
    return str(key).encode(), value


class KafkaAuditSink:
    def __init__(
        self,
        factory: ProducerFactory,
        spool: Spool,
        *,
        topic: str,
        batch_size: int = 100,
        ack_timeout: float = 10.0,
        retry_backoff: float = 1.0,
        max_pending: int = 10_000,
        spool_max_bytes: int = 1 << 30,
    ) -> None:
        self._factory = factory
        self._spool = spool
        self._topic = topic
        self._batch_size = batch_size
        self._ack_timeout = ack_timeout
        self._retry_backoff = retry_backoff
        self._max_pending = max_pending
        self._spool_max_bytes = spool_max_bytes
        self._producer: Producer | None = None
        self._pending: deque[Record] = deque()
        self._inflight: list[Record] = []
        self._wake = asyncio.Event()
        self._spooling = False
        self._spool_end = 0
        """Bytes submitted to the spool (written or about to be)."""
        self._acked = 0
        """Spool offset up to which Kafka acknowledged."""
        self._last_append: asyncio.Future[int] | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    # --- the AuditSink interface -------------------------------------------------------

    def emit(self, event: AuditEvent) -> None:
        """Never blocks or raises: queue in memory (direct) or hand to the spool thread (spooling)."""
        if self._closed:
            AUDIT_DROPPED.labels("closed").inc()
            log.error("audit_sink_closed", event_id=event.event_id, kind=event.kind)
            return
        record = audit_record(event)
        if self._spooling:
            self._to_spool([record])
            return
        self._pending.append(record)
        if len(self._pending) > self._max_pending:
            log.warning("audit_queue_full", pending=len(self._pending), detail="spilling to the spool")
            self._enter_spooling([])
        self._wake.set()

    # --- lifecycle ------------------------------------------------------------------------

    @property
    def spooling(self) -> bool:
        return self._spooling

    @property
    def unacknowledged(self) -> int:
        """Events queued in memory or in flight (the spool is counted in bytes: ``spool_bytes``)."""
        return len(self._pending) + len(self._inflight)

    @property
    def spool_bytes(self) -> int:
        return self._spool_end - self._acked

    async def start(self) -> None:
        size = await self._spool.open()
        self._spool_end = size
        self._acked = 0
        if size:
            log.info("audit_spool_found", bytes=size, detail="replaying before new events")
            self._set_spooling(True)
        self._task = asyncio.create_task(self._run(), name="audit-sink")

    async def stop(self, *, drain_timeout: float = 5.0) -> None:
        """Give the task ``drain_timeout`` to deliver what is queued, then spool the rest and close.

        Events emitted after ``stop`` are dropped and counted (``reason="closed"``).
        """
        if self._task is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._drained(), drain_timeout)
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        leftover = self._inflight + list(self._pending)
        self._inflight = []
        self._pending.clear()
        if leftover:
            self._to_spool(leftover)
        self._closed = True
        if self._last_append is not None:
            with contextlib.suppress(Exception):
                await self._last_append
        await self._spool.close()
        if self._producer is not None:
            await stop_quietly(self._producer, self._ack_timeout)
            self._producer = None

    async def _drained(self) -> None:
        while self._pending or self._inflight:
            if self._spooling:
                return  # the spool is durable: nothing is left to wait for
            await asyncio.sleep(0.01)

    # --- the task ---------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                await self._step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # never let the task die: a dead task would spool forever  # noqa: BLE001 - see the comment
                log.error("audit_sink_error", error=repr(exc))
                if self._inflight:  # back to the head of the queue, in order
                    self._pending.extendleft(reversed(self._inflight))
                    self._inflight = []
                await asyncio.sleep(self._retry_backoff)

    async def _step(self) -> None:
        """One unit of work: a spool batch, or a queued batch, or a wait for events."""
        if self._spooling:
            if not await self._replay_once():
                await asyncio.sleep(self._retry_backoff)
            return
        if not self._pending:
            self._wake.clear()
            await self._wake.wait()
            return
        batch = [self._pending.popleft() for _ in range(min(self._batch_size, len(self._pending)))]
        self._inflight = batch
        if await self._send(batch):
            AUDIT_SENT.inc(len(batch))
            self._inflight = []
        else:
            self._inflight = []
            if self._spooling:
                # Spilled while in flight (queue overflow): order across that spill is lost.
                self._to_spool(batch)
            else:
                self._enter_spooling(batch)
            await asyncio.sleep(self._retry_backoff)

    async def _replay_once(self) -> bool:
        """One spool batch to Kafka. False when Kafka did not take it (the caller backs off)."""
        values, next_offset = await self._spool.read(self._acked, self._batch_size)
        if not values:
            if self._acked >= self._spool_end:
                # Everything spooled is acknowledged; the check and the switch share one loop step.
                self._set_spooling(False)
                self._acked = self._spool_end = 0
                AUDIT_SPOOL_BYTES.set(0)
                self._spool.truncate().add_done_callback(_log_failure("audit_spool_truncate_failed"))
                log.info("audit_spool_replayed", detail="back to direct delivery")
                self._wake.set()
                return True
            await asyncio.sleep(0.01)  # an append is still on the spool thread
            return True
        records = [record for record in map(_from_spool, values) if record is not None]
        if len(records) < len(values):
            AUDIT_DROPPED.labels("spool_corrupt").inc(len(values) - len(records))
            log.error("audit_spool_corrupt_lines", skipped=len(values) - len(records))
        if records and not await self._send(records):
            return False
        self._acked = next_offset
        AUDIT_REPLAYED.inc(len(values))
        AUDIT_SPOOL_BYTES.set(self.spool_bytes)
        return True

    async def _send(self, records: list[Record]) -> bool:
        producer = await self._ensure_producer()
        if producer is None:
            return False
        try:
            futures = []
            for key, value in records:
                futures.append(await asyncio.wait_for(producer.send(self._topic, value, key), self._ack_timeout))
            await asyncio.wait_for(asyncio.gather(*futures), self._ack_timeout)
        except asyncio.CancelledError:
            raise
        except (Exception, asyncio.TimeoutError) as exc:  # noqa: BLE001 - any producer failure spools the batch
            kafka_error("audit", exc)
            log.warning("audit_send_failed", events=len(records), error=repr(exc))
            await self._discard_producer()
            return False
        return True

    async def _ensure_producer(self) -> Producer | None:
        if self._producer is not None:
            return self._producer
        producer = self._factory()
        try:
            await asyncio.wait_for(producer.start(), self._ack_timeout)
        except asyncio.CancelledError:
            await stop_quietly(producer, self._ack_timeout)
            raise
        except (Exception, asyncio.TimeoutError) as exc:  # noqa: BLE001 - any producer failure means Kafka is unavailable
            kafka_error("audit", exc)
            log.warning("kafka_unavailable", sink="audit", error=repr(exc))
            await stop_quietly(producer, self._ack_timeout)
            return None
        self._producer = producer
        return producer

    async def _discard_producer(self) -> None:
        # A fresh producer after a failure: no expired batches, a new idempotent producer id.
        producer, self._producer = self._producer, None
        if producer is not None:
            await stop_quietly(producer, self._ack_timeout)

    # --- the spool side ----------------------------------------------------------------------

    def _enter_spooling(self, first: list[Record]) -> None:
        """Move ``first`` then every queued event to the spool, and send new events there too."""
        records = first + list(self._pending)
        self._pending.clear()
        self._set_spooling(True)
        if records:
            self._to_spool(records)

    def _set_spooling(self, on: bool) -> None:
        if on and not self._spooling:
            log.warning("audit_spooling", detail="kafka unavailable; audit events go to the spool")
        self._spooling = on
        AUDIT_SPOOLING.set(1 if on else 0)

    def _to_spool(self, records: list[Record]) -> None:
        lines = [value for _, value in records]
        size = sum(len(line) + 1 for line in lines)
        if self._spool_end - self._acked + size > self._spool_max_bytes:
            AUDIT_DROPPED.labels("spool_full").inc(len(lines))
            log.error("audit_spool_full", dropped=len(lines), max_bytes=self._spool_max_bytes)
            return
        try:
            future = self._spool.append(lines)
        except RuntimeError as exc:  # no running loop, or the spool thread is gone
            AUDIT_DROPPED.labels("spool_error").inc(len(lines))
            log.error("audit_spool_write_failed", dropped=len(lines), error=repr(exc))
            return
        self._spool_end += size
        AUDIT_SPOOL_BYTES.set(self.spool_bytes)
        self._last_append = future

        def done(f: asyncio.Future[int]) -> None:
            exc = f.exception() if not f.cancelled() else None
            if f.cancelled() or exc is not None:
                self._spool_end -= size
                AUDIT_DROPPED.labels("spool_error").inc(len(lines))
                log.error("audit_spool_write_failed", dropped=len(lines), error=repr(exc))
            else:
                AUDIT_SPOOLED.inc(len(lines))

        future.add_done_callback(done)


def _log_failure(event: str) -> Any:
    def done(future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is not None:
            log.error(event, error=repr(future.exception()))

    return done
