"""The slice of a Kafka producer the sinks use, and the aiokafka implementation.

Sinks depend on ``Producer`` and receive a ``ProducerFactory``: unit tests pass a fake,
the process passes ``aiokafka_factory(...)``. A sink that sees a failure throws its
producer away and asks the factory for a new one (a fresh idempotent producer id, no
half-expired batches).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Protocol


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
    except (Exception, asyncio.TimeoutError):
        pass
