"""Where a process (ext_authz, the control plane) sends its audit events, from its config:

    audit:
      kafka: {bootstrapServers: [kafka-0:9092], auditTopic: gateway-audit-log}
      spoolDir: /var/lib/gatehouse/audit-spool    # one per process: it is locked while in use

Without ``kafka`` the events go to the process's log (``LogAuditSink``). With it they go
to Kafka (acks=all, idempotent), spooled to disk with fsync while Kafka is unreachable
and replayed in order when it is back, also after a restart.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from typing import Annotated

from pydantic import Field

from servicekit.audit import AuditEvent, AuditSink, LogAuditSink
from servicekit.audit_kafka import KafkaAuditSink
from servicekit.kafka import KafkaSink, ProducerFactory, aiokafka_factory
from servicekit.model import Model
from servicekit.spool import Spool


class Audit(Model):
    spool_dir: str = "audit-spool"
    """Relative paths are resolved against the config file's directory."""
    max_pending: Annotated[int, Field(ge=1)] = 10_000
    spool_max_bytes: Annotated[int, Field(ge=4096)] = 1 << 30
    batch_size: Annotated[int, Field(ge=1, le=10_000)] = 100


class AuditOutput(Audit):
    kafka: KafkaSink | None = None


class AuditChannel:
    """An ``AuditSink`` with a lifecycle: ``await start()`` before serving, ``await stop()`` after."""

    def __init__(self, output: AuditOutput | None, resolve: Callable[[str], Path]) -> None:
        self._kafka: KafkaAuditSink | None = None
        self.sink: AuditSink = LogAuditSink()
        if output is not None and output.kafka is not None:
            self._kafka = kafka_audit_sink(output.kafka, output, resolve(output.spool_dir))
            self.sink = self._kafka

    def emit(self, event: AuditEvent) -> None:
        self.sink.emit(event)

    async def start(self) -> None:
        if self._kafka is not None:
            await self._kafka.start()

    async def stop(self) -> None:
        if self._kafka is not None:
            await self._kafka.stop()


def kafka_audit_sink(kafka: KafkaSink, audit: Audit, spool_dir: Path) -> KafkaAuditSink:
    return KafkaAuditSink(
        audit_producer_factory(kafka),
        Spool(spool_dir),
        topic=kafka.audit_topic,
        batch_size=audit.batch_size,
        ack_timeout=kafka.request_timeout.seconds,
        retry_backoff=kafka.retry_backoff.seconds,
        max_pending=audit.max_pending,
        spool_max_bytes=audit.spool_max_bytes,
    )


def audit_producer_factory(kafka: KafkaSink) -> ProducerFactory:
    """acks=all and idempotence: an audit event is acknowledged by every in-sync replica, once."""
    return aiokafka_factory(
        bootstrap_servers=kafka.bootstrap_servers,
        client_id=f"{kafka.client_id}-audit",
        acks="all",
        idempotent=True,
        linger_ms=kafka.linger,
        request_timeout_ms=kafka.request_timeout,
        compression="lz4",
    )
