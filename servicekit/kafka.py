"""Kafka for every service: the connection settings, the slice of a producer the sinks
use with its aiokafka implementation, and how failures are counted.

Sinks depend on ``Producer`` and receive a ``ProducerFactory``: unit tests pass a fake,
the process passes ``aiokafka_factory(...)``. A sink that sees a failure throws its
producer away and asks the factory for a new one (a fresh idempotent producer id, no
half-expired batches).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Final, Protocol

from prometheus_client import Counter
from pydantic import Field

from servicekit.config_file import HostPort
from servicekit.durations import Duration, Millis
from servicekit.model import Model

SCHEMA_VERSION: Final = 1
"""The version of every record Gatehouse writes to Kafka (access and audit events); bump it
on any change to either schema (docs/telemetry.md)."""

KAFKA_ERRORS = Counter("gatehouse_telemetry_kafka_errors_total", "Kafka failures", ["sink", "reason"])


class KafkaSink(Model):
    bootstrap_servers: Annotated[list[HostPort], Field(min_length=1)]
    access_log_topic: str = "gateway-access-log"
    audit_topic: str = "gateway-audit-log"
    client_id: str = "gatehouse-telemetry"
    request_timeout: Duration = Millis(5000)
    """aiokafka request_timeout_ms; also bounds producer start, send and ack waits."""
    linger: Duration = Millis(10)
    retry_backoff: Duration = Millis(1000)


def kafka_error(sink: str, exc: BaseException) -> str:
    """Count one Kafka failure by kind; returns the reason label."""
    name = type(exc).__name__
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)) or "Timeout" in name:
        reason = "timeout"
    elif "Connection" in name or isinstance(exc, OSError):
        reason = "connection"
    elif "Kafka" in name:
        reason = "kafka"
    else:
        reason = "other"
    KAFKA_ERRORS.labels(sink, reason).inc()
    return reason


class Producer(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def send(
        self, topic: str, value: bytes | None = None, key: bytes | None = None
    ) -> asyncio.Future[Any]:
        """Queue one record; the returned future resolves when the broker acknowledged it."""
        ...


ProducerFactory = Callable[[], Producer]


def aiokafka_factory(
    *,
    bootstrap_servers: Sequence[str],
    client_id: str,
    acks: int | str,
    idempotent: bool,
    linger_ms: int,
    request_timeout_ms: int,
    compression: str | None,
    max_batch_size: int = 16384,
) -> ProducerFactory:
    """A factory of ``AIOKafkaProducer``s with every network wait bounded."""
    from aiokafka import AIOKafkaProducer

    def make() -> Producer:
        producer: Producer = AIOKafkaProducer(
            bootstrap_servers=list(bootstrap_servers),
            client_id=client_id,
            acks=acks,
            enable_idempotence=idempotent,
            linger_ms=linger_ms,
            request_timeout_ms=request_timeout_ms,
            metadata_max_age_ms=max(request_timeout_ms * 6, 30_000),
            retry_backoff_ms=200,
            connections_max_idle_ms=540_000,
            compression_type=compression,
            max_batch_size=max_batch_size,
        )
        return producer

    return make


async def stop_quietly(producer: Producer, timeout: float) -> None:
    """Stop a producer we are discarding, bounded in time and never raising."""
    try:
        await asyncio.wait_for(producer.stop(), timeout)
    except (Exception, asyncio.TimeoutError):  # noqa: BLE001, S110 - stopping a producer we are discarding
        pass
