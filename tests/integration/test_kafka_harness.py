"""The Kafka harness starts a real KRaft broker that behaves like Kafka: produce, consume, outage.

Produces with aiokafka the way a Gatehouse component would (acks=all, idempotent, lz4),
reads everything back from the beginning, then SIGKILLs the broker (an outage), restarts it
on the same ports and data directory, and checks that the earlier records survived and that
new ones are accepted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError, KafkaError

from tests.harness.kafka import KafkaBroker, kafka_version

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    started = time.monotonic()
    broker = KafkaBroker.start(tmp_path)
    print(f"kafka {kafka_version()} started in {time.monotonic() - started:.1f}s at {broker.bootstrap}")
    try:
        yield broker
    finally:
        broker.stop()


async def produce(bootstrap: str, topic: str, values: list[bytes], key: bytes | None = None) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        compression_type="lz4",
        linger_ms=5,
    )
    try:
        await producer.start()
        futures = [await producer.send(topic, value, key=key) for value in values]
        await producer.flush()
        for future in futures:
            metadata = await future
            assert metadata.offset >= 0
    finally:
        await producer.stop()


def test_produce_consume_lz4_idempotent(broker: KafkaBroker) -> None:
    broker.create_topic("audit", partitions=1)
    assert "audit" in broker.list_topics()
    values = [f"event-{i}".encode() for i in range(100)]
    asyncio.run(produce(broker.bootstrap, "audit", values))
    assert broker.consume("audit", expected=100, timeout=30) == values
    # Nothing else is there: asking for one more times out.
    with pytest.raises(TimeoutError, match="100 of 101"):
        broker.consume("audit", expected=101, timeout=2)


def test_multi_partition_topic_keeps_per_key_order(broker: KafkaBroker) -> None:
    broker.create_topic("multi", partitions=3)
    values = [f"k-{i}".encode() for i in range(30)]
    asyncio.run(produce(broker.bootstrap, "multi", values, key=b"same-key"))
    records = broker.consume_records("multi", expected=30, timeout=30)
    assert [r.value for r in records] == values
    assert len({r.partition for r in records}) == 1


def test_auto_created_topic(broker: KafkaBroker) -> None:
    broker.produce("auto", [b"a", b"b"])
    assert broker.consume("auto", expected=2, timeout=30) == [b"a", b"b"]


def test_kill_restart_keeps_data_and_accepts_new_records(broker: KafkaBroker) -> None:
    broker.create_topic("durable", partitions=2)
    before = [f"before-{i}".encode() for i in range(50)]
    asyncio.run(produce(broker.bootstrap, "durable", before))
    assert sorted(broker.consume("durable", expected=50, timeout=30)) == sorted(before)
    port, data_dir, pid = broker.port, broker.data_dir, broker.pid

    broker.kill()
    assert not broker.alive()
    with pytest.raises((KafkaConnectionError, KafkaError, asyncio.TimeoutError)):
        asyncio.run(asyncio.wait_for(produce(broker.bootstrap, "durable", [b"lost"]), 5))

    broker.restart()
    print(f"kafka restarted after SIGKILL in {broker.last_start_seconds:.1f}s")
    assert (broker.port, broker.data_dir) == (port, data_dir)
    assert broker.pid != pid
    assert "durable" in broker.list_topics()
    after = [f"after-{i}".encode() for i in range(50)]
    asyncio.run(produce(broker.bootstrap, "durable", after))
    got = broker.consume("durable", expected=100, timeout=60)
    assert sorted(got) == sorted(before + after)
    # Within each partition, the order of production is kept across the restart.
    records = broker.consume_records("durable", expected=100, timeout=60)
    for partition in {r.partition for r in records}:
        seq = [r.value for r in records if r.partition == partition]
        assert seq == [v for v in before + after if v in seq]


def test_graceful_restart(broker: KafkaBroker) -> None:
    broker.create_topic("graceful")
    broker.produce("graceful", [b"one"])
    broker.restart()
    broker.produce("graceful", [b"two"])
    assert broker.consume("graceful", expected=2, timeout=30) == [b"one", b"two"]
