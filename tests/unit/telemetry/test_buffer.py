"""The bounded buffer drops and counts instead of blocking; the pipeline drains it in batches;
the ALS gRPC handler turns a stream of entries into buffered events."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc
from prometheus_client import REGISTRY

from telemetry.als import AccessLogService
from telemetry.buffer import EventBuffer
from telemetry.writers import AccessLogPipeline, KafkaAccessWriter, LinesWriter
from tests.harness.ports import free_port
from tests.unit.telemetry.entries import full_entry
from tests.unit.telemetry.fakes import FakeBroker


def dropped(reason: str) -> float:
    return REGISTRY.get_sample_value("gatehouse_telemetry_access_dropped_total", {"reason": reason}) or 0.0


def sent() -> float:
    return REGISTRY.get_sample_value("gatehouse_telemetry_access_sent_total") or 0.0


async def test_full_buffer_drops_and_counts() -> None:
    buffer = EventBuffer(max_events=3)
    before = dropped("buffer_full")
    results = [buffer.offer(f"e{i}".encode()) for i in range(5)]
    assert results == [True, True, True, False, False]
    assert buffer.dropped == 2
    assert dropped("buffer_full") - before == 2
    assert REGISTRY.get_sample_value("gatehouse_telemetry_access_buffered") == 3
    assert buffer.take(2) == [b"e0", b"e1"]
    assert buffer.offer(b"e5")
    assert buffer.take(10) == [b"e2", b"e5"]


async def test_wait_returns_only_when_something_is_buffered() -> None:
    buffer = EventBuffer(max_events=10)
    waiter = asyncio.create_task(buffer.wait())
    await asyncio.sleep(0.01)
    assert not waiter.done()
    buffer.offer(b"x")
    await asyncio.wait_for(waiter, 1)
    buffer.take(1)
    assert not buffer._ready.is_set()


def test_zero_size_is_refused() -> None:
    with pytest.raises(ValueError):
        EventBuffer(max_events=0)


async def test_pipeline_to_kafka_batches_without_blocking_the_offerer() -> None:
    broker = FakeBroker()
    buffer = EventBuffer(max_events=100)
    writer = KafkaAccessWriter(broker.factory, topic="gateway-access-log", send_timeout=1.0)
    await writer.start()
    before = sent()
    task = asyncio.create_task(AccessLogPipeline(buffer, writer, batch_size=7).run())
    for i in range(50):
        assert buffer.offer(f'{{"n":{i}}}'.encode())
    await _until(lambda: len(broker.records) == 50)
    assert [json.loads(v)["n"] for v in broker.values("gateway-access-log")] == list(range(50))
    assert sent() - before == 50
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await writer.close()


async def test_kafka_down_drops_instead_of_blocking() -> None:
    broker = FakeBroker()
    broker.up = False
    buffer = EventBuffer(max_events=10)
    writer = KafkaAccessWriter(broker.factory, topic="t", send_timeout=0.2, retry_backoff=0.2)
    await writer.start()
    assert not writer.healthy
    full_before, sink_before = dropped("buffer_full"), dropped("sink_error")
    task = asyncio.create_task(AccessLogPipeline(buffer, writer, batch_size=5).run())
    for i in range(30):
        buffer.offer(b"{}")  # never blocks, whatever Kafka does
        await asyncio.sleep(0)
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    lost = (dropped("buffer_full") - full_before) + (dropped("sink_error") - sink_before)
    assert lost == 30
    assert dropped("buffer_full") - full_before > 0
    assert broker.records == []


async def test_failed_acks_count_as_sink_errors() -> None:
    broker = FakeBroker()
    writer = KafkaAccessWriter(broker.factory, topic="t", send_timeout=1.0)
    await writer.start()
    broker.hold = True
    before = dropped("sink_error")
    await writer.write([b"a", b"b"])
    broker.fail_held()
    await asyncio.sleep(0)
    assert dropped("sink_error") - before == 2
    assert not writer.healthy


async def test_lines_writer_appends_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "access.jsonl"
    writer = LinesWriter.to_file(path)
    buffer = EventBuffer(max_events=10)
    task = asyncio.create_task(AccessLogPipeline(buffer, writer, batch_size=2).run())
    for i in range(5):
        buffer.offer(f'{{"n":{i}}}'.encode())
    await _until(lambda: path.exists() and path.read_bytes().count(b"\n") == 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await writer.close()
    assert [json.loads(line)["n"] for line in path.read_text().splitlines()] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(("capacity", "kept"), [(100, 7), (4, 4)])
async def test_als_stream_buffers_one_event_per_entry(capacity: int, kept: int) -> None:
    """Past the buffer's capacity, entries are counted as dropped (and never encoded)."""
    buffer = EventBuffer(max_events=capacity)
    before = dropped("buffer_full")
    server = grpc.aio.server()
    als_pb2_grpc.add_AccessLogServiceServicer_to_server(AccessLogService(buffer), server)
    address = f"127.0.0.1:{free_port()}"
    server.add_insecure_port(address)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = als_pb2_grpc.AccessLogServiceStub(channel)

            async def messages() -> AsyncIterator[als_pb2.StreamAccessLogsMessage]:
                first = als_pb2.StreamAccessLogsMessage()
                first.identifier.node.id = "envoy-0"
                first.identifier.log_name = "gatehouse"
                first.http_logs.log_entry.append(full_entry())
                yield first
                for _ in range(3):
                    message = als_pb2.StreamAccessLogsMessage()
                    message.http_logs.log_entry.extend([full_entry(), full_entry()])
                    yield message

            await asyncio.wait_for(stub.StreamAccessLogs(messages()), 5)
    finally:
        await server.stop(grace=None)
    events = [json.loads(e) for e in buffer.take(100)]
    assert len(events) == kept
    assert {e["user_id"] for e in events} == {"alice"}
    assert dropped("buffer_full") - before == 7 - kept
    assert buffer.dropped == 7 - kept


async def _until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)
