"""The audit spool file (append+fsync, ordered reads, torn tails) and KafkaAuditSink over a
fake Kafka: direct delivery, an outage spooled in order, replay, truncation only after the
ack, and a restart during the outage that loses nothing."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import pytest
from prometheus_client import REGISTRY

from servicekit.audit import AuditEvent
from servicekit.audit_kafka import KafkaAuditSink, audit_record
from servicekit.spool import SPOOL_NAME, Spool, SpoolFile, SpoolLockedError
from tests.unit.telemetry.fakes import FakeBroker

TOPIC = "gateway-audit-log"


def event(n: int, subject: str = "alice") -> AuditEvent:
    return AuditEvent(kind="authz.denied", actor="ext_authz", subject=subject, reason="expired", details={"n": n})


def numbers(values: list[bytes]) -> list[int]:
    return [json.loads(v)["details"]["n"] for v in values]


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def make_sink(broker: FakeBroker, directory: Path, **kwargs: object) -> KafkaAuditSink:
    options: dict[str, object] = {"ack_timeout": 0.5, "retry_backoff": 0.05, "batch_size": 4}
    options.update(kwargs)
    return KafkaAuditSink(broker.factory, Spool(directory), topic=TOPIC, **options)  # type: ignore[arg-type]


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


# --- SpoolFile ---------------------------------------------------------------------------------


def test_append_fsyncs_and_reads_back_in_order(tmp_path: Path) -> None:
    spool = SpoolFile(tmp_path / "s" / SPOOL_NAME)
    with mock.patch("servicekit.spool.os.fsync", wraps=os.fsync) as fsync:
        spool.append([b'{"n":1}', b'{"n":2}'])
        spool.append([b'{"n":3}'])
    assert fsync.call_count == 2
    records, offset = spool.read(0, 2)
    assert records == [b'{"n":1}', b'{"n":2}']
    records, end = spool.read(offset, 10)
    assert records == [b'{"n":3}'] and end == spool.size()
    assert spool.read(end, 10) == ([], end)
    spool.truncate()
    assert spool.size() == 0
    spool.append([b'{"n":4}'])
    assert spool.read(0, 10)[0] == [b'{"n":4}']
    spool.close()


def test_torn_tail_from_a_crash_is_cut_on_open(tmp_path: Path) -> None:
    path = tmp_path / SPOOL_NAME
    path.write_bytes(b'{"n":1}\n{"n":2}\n{"n":')
    spool = SpoolFile(path)
    assert spool.read(0, 10)[0] == [b'{"n":1}', b'{"n":2}']
    spool.append([b'{"n":3}'])
    assert spool.read(0, 10)[0] == [b'{"n":1}', b'{"n":2}', b'{"n":3}']
    spool.close()


def test_one_writer_per_spool(tmp_path: Path) -> None:
    first = SpoolFile(tmp_path / SPOOL_NAME)
    with pytest.raises(SpoolLockedError, match="own spoolDir"):
        SpoolFile(tmp_path / SPOOL_NAME)
    first.close()
    SpoolFile(tmp_path / SPOOL_NAME).close()


def test_line_longer_than_the_read_window(tmp_path: Path) -> None:
    spool = SpoolFile(tmp_path / SPOOL_NAME)
    big = b'"' + b"x" * 3000 + b'"'
    spool.append([big, b"1"])
    assert spool.read(0, 10, max_bytes=1024)[0] == [big]
    spool.close()


# --- KafkaAuditSink ----------------------------------------------------------------------------


def test_record_is_keyed_by_subject_and_carries_the_event_id() -> None:
    e = event(1)
    key, value = audit_record(e)
    body = json.loads(value)
    assert key == b"alice"
    assert body["event_id"] == e.event_id and body["type"] == "audit" and body["schema_version"] == 1
    assert audit_record(AuditEvent(kind="admin.call", actor="admin"))[0] == b"admin"


async def test_direct_delivery(tmp_path: Path) -> None:
    broker = FakeBroker()
    sink = make_sink(broker, tmp_path)
    await sink.start()
    before = metric("gatehouse_telemetry_audit_sent_total")
    for n in range(10):
        sink.emit(event(n))
    await until(lambda: len(broker.records) == 10)
    assert numbers(broker.values(TOPIC)) == list(range(10))
    assert {key for _, _, key in broker.records} == {b"alice"}
    assert metric("gatehouse_telemetry_audit_sent_total") - before == 10
    await sink.stop()
    assert (tmp_path / SPOOL_NAME).read_bytes() == b""


async def test_outage_spools_in_order_then_replays_and_truncates_after_ack(tmp_path: Path) -> None:
    broker = FakeBroker()
    sink = make_sink(broker, tmp_path)
    await sink.start()
    sink.emit(event(0))
    await until(lambda: len(broker.records) == 1)

    broker.up = False
    spooled_before = metric("gatehouse_telemetry_audit_spooled_total")
    for n in range(1, 6):
        sink.emit(event(n))
    await until(lambda: sink.spooling)
    for n in range(6, 11):
        sink.emit(event(n))  # straight to the spool
    spool_path = tmp_path / SPOOL_NAME
    await until(lambda: spool_path.read_bytes().count(b"\n") == 10)
    assert numbers(spool_path.read_bytes().splitlines()) == list(range(1, 11))
    # The counter moves when the spool thread's write completes, just after the bytes land.
    await until(lambda: metric("gatehouse_telemetry_audit_spooled_total") - spooled_before == 10)
    assert metric("gatehouse_telemetry_audit_spooling") == 1

    # Kafka is back but holds its acks: replay is under way, and the spool must stay whole.
    broker.up = True
    broker.hold = True
    await until(lambda: len(broker.held) > 0)
    await asyncio.sleep(0.1)
    assert spool_path.read_bytes().count(b"\n") == 10
    assert sink.spooling
    replayed_before = metric("gatehouse_telemetry_audit_replayed_total")
    broker.hold = False
    broker.release()
    await until(lambda: not sink.spooling)
    await until(lambda: spool_path.stat().st_size == 0)
    assert metric("gatehouse_telemetry_audit_replayed_total") - replayed_before == 10
    assert metric("gatehouse_telemetry_audit_spool_bytes") == 0

    sink.emit(event(11))  # back to direct
    await until(lambda: 11 in numbers(broker.values(TOPIC)))
    delivered = numbers(broker.values(TOPIC))
    # At least once: a held batch that timed out may have been re-sent; the first copies are in order.
    assert sorted(set(delivered)) == list(range(12))
    first_seen = list(dict.fromkeys(delivered))
    assert first_seen == list(range(12))
    await sink.stop()


async def test_restart_during_outage_loses_nothing(tmp_path: Path) -> None:
    broker = FakeBroker()
    broker.up = False
    first = make_sink(broker, tmp_path)
    await first.start()
    events = [event(n, subject=f"user-{n % 3}") for n in range(8)]
    for e in events[:5]:
        first.emit(e)
    await until(lambda: first.spooling)
    for e in events[5:]:
        first.emit(e)
    await first.stop(drain_timeout=0.2)  # the process stops while Kafka is still away

    second = make_sink(broker, tmp_path)  # a new process reading the same spool
    await second.start()
    assert second.spooling
    second.emit(event(100))  # new events queue behind the spool
    await asyncio.sleep(0.1)
    assert broker.records == []
    broker.up = True
    await until(lambda: 100 in numbers(broker.values(TOPIC)))
    values = broker.values(TOPIC)
    assert numbers(values) == [*range(8), 100]
    assert [json.loads(v)["event_id"] for v in values[:8]] == [e.event_id for e in events]
    assert [key for _, _, key in broker.records[:3]] == [b"user-0", b"user-1", b"user-2"]
    await second.stop()
    assert (tmp_path / SPOOL_NAME).read_bytes() == b""


async def test_stop_spools_what_kafka_never_acknowledged(tmp_path: Path) -> None:
    broker = FakeBroker()
    sink = make_sink(broker, tmp_path, ack_timeout=5.0)
    await sink.start()
    broker.hold = True
    for n in range(3):
        sink.emit(event(n))
    await until(lambda: len(broker.held) > 0)
    await sink.stop(drain_timeout=0.1)
    assert numbers((tmp_path / SPOOL_NAME).read_bytes().splitlines()) == [0, 1, 2]


async def test_queue_overflow_spills_to_the_spool(tmp_path: Path) -> None:
    broker = FakeBroker()
    sink = make_sink(broker, tmp_path, max_pending=3, ack_timeout=5.0)
    await sink.start()
    broker.hold = True
    for n in range(10):
        sink.emit(event(n))
    assert sink.spooling
    broker.hold = False
    broker.release()
    await until(lambda: set(range(10)) <= set(numbers(broker.values(TOPIC))))
    await sink.stop()


async def test_full_spool_drops_and_counts(tmp_path: Path) -> None:
    broker = FakeBroker()
    broker.up = False
    sink = make_sink(broker, tmp_path, spool_max_bytes=4096)
    await sink.start()
    before = metric("gatehouse_telemetry_audit_dropped_total", reason="spool_full")
    sink.emit(event(0))
    await until(lambda: sink.spooling)
    for n in range(1, 40):
        sink.emit(event(n))
    dropped = metric("gatehouse_telemetry_audit_dropped_total", reason="spool_full") - before
    assert dropped > 0
    await sink.stop(drain_timeout=0.1)
    kept = (tmp_path / SPOOL_NAME).read_bytes().count(b"\n")
    assert kept + dropped == 40
    assert (tmp_path / SPOOL_NAME).stat().st_size <= 4096


async def test_emit_never_waits_for_fsync(tmp_path: Path) -> None:
    broker = FakeBroker()
    broker.up = False
    sink = make_sink(broker, tmp_path)
    await sink.start()
    sink.emit(event(0))
    await until(lambda: sink.spooling)
    gate = asyncio.Event()
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        import time

        time.sleep(0.2)
        real_fsync(fd)

    with mock.patch("servicekit.spool.os.fsync", slow_fsync):
        loop = asyncio.get_running_loop()
        start = loop.time()
        for n in range(1, 6):
            sink.emit(event(n))
        assert loop.time() - start < 0.05
        gate.set()
        await sink.stop(drain_timeout=0.1)
    assert numbers((tmp_path / SPOOL_NAME).read_bytes().splitlines()) == list(range(6))


@pytest.mark.parametrize("down_at_start", [True, False])
async def test_start_without_kafka_then_recovery(tmp_path: Path, down_at_start: bool) -> None:
    broker = FakeBroker()
    broker.up = not down_at_start
    sink = make_sink(broker, tmp_path)
    await sink.start()
    broker.up = False
    sink.emit(event(0))
    await until(lambda: sink.spooling)
    broker.up = True
    await until(lambda: numbers(broker.values(TOPIC)) == [0] and not sink.spooling)
    await sink.stop()


async def test_damaged_spool_line_is_skipped_and_counted(tmp_path: Path) -> None:
    good = [audit_record(event(n))[1] for n in range(3)]
    (tmp_path / SPOOL_NAME).write_bytes(good[0] + b"\nnot json\n[1]\n" + good[1] + b"\n" + good[2] + b"\n")
    broker = FakeBroker()
    before = metric("gatehouse_telemetry_audit_dropped_total", reason="spool_corrupt")
    sink = make_sink(broker, tmp_path)
    await sink.start()
    await until(lambda: not sink.spooling)
    assert numbers(broker.values(TOPIC)) == [0, 1, 2]
    assert metric("gatehouse_telemetry_audit_dropped_total", reason="spool_corrupt") - before == 2
    await sink.stop()


async def test_sink_task_survives_an_unexpected_error(tmp_path: Path) -> None:
    broker = FakeBroker()
    sink = make_sink(broker, tmp_path)
    await sink.start()
    real = sink._send
    calls = 0

    async def flaky(records: list[tuple[bytes, bytes]]) -> bool:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("bug")
        return await real(records)

    with mock.patch.object(sink, "_send", flaky):
        sink.emit(event(0))
        await until(lambda: calls >= 1)
        sink.emit(event(1))
        await until(lambda: 1 in numbers(broker.values(TOPIC)))
    assert numbers(broker.values(TOPIC)) == [0, 1]  # the batch that hit the error is not lost
    await sink.stop()


async def test_emit_after_stop_is_counted_not_raised(tmp_path: Path) -> None:
    sink = make_sink(FakeBroker(), tmp_path)
    await sink.start()
    await sink.stop()
    before = metric("gatehouse_telemetry_audit_dropped_total", reason="closed")
    sink.emit(event(0))
    assert metric("gatehouse_telemetry_audit_dropped_total", reason="closed") - before == 1
