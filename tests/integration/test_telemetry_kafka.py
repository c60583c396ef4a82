"""telemetry against a real Kafka broker (tests/harness/kafka.py).

(a) Envoy's side of ALS, played by a grpc.aio client: N entries in → N access events on
    `gateway-access-log`, with the fields taken from the entries.
(b) An outage: the broker is SIGKILLed; audit events emitted meanwhile are spooled; the
    audit sink is stopped and a new one started on the same spool (a process restart);
    the broker comes back; every audit event arrives (deduped by event_id), in order, and
    the spool is empty. Access events sent during the outage are dropped and counted, and
    access events flow again once the broker is back.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc
from prometheus_client import REGISTRY

from servicekit.audit import AuditEvent
from telemetry.config import TelemetryConfig
from servicekit.audit_output import kafka_audit_sink
from telemetry.runtime import TelemetryProcess
from servicekit.spool import SPOOL_NAME
from tests.harness.kafka import KafkaBroker
from tests.harness.ports import free_port
from tests.unit.telemetry.entries import full_entry

ACCESS = "gateway-access-log"
AUDIT = "gateway-audit-log"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    broker = KafkaBroker.start(tmp_path / "kafka")
    try:
        broker.create_topic(ACCESS)
        broker.create_topic(AUDIT)
        yield broker
    finally:
        broker.stop()


def config(broker: KafkaBroker, tmp_path: Path, **buffer: int) -> TelemetryConfig:
    return TelemetryConfig.model_validate(
        {
            "listen": f"127.0.0.1:{free_port()}",
            "metrics": {"listen": f"127.0.0.1:{free_port()}"},
            "sink": {"kafka": {"bootstrapServers": [broker.bootstrap], "requestTimeout": "2s",
                               "retryBackoff": "200ms"}},
            "buffer": {"maxEvents": 1000, "batchSize": 100, **buffer},
            "audit": {"spoolDir": str(tmp_path / "spool"), "batchSize": 10},
        }
    )


@pytest.fixture
async def process(broker: KafkaBroker, tmp_path: Path) -> AsyncIterator[TelemetryProcess]:
    process = TelemetryProcess(config(broker, tmp_path, maxEvents=50))
    task = asyncio.create_task(process.run())
    await until(lambda: process.listening or task.done(), 20)
    if task.done():
        task.result()
    yield process
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def until(condition: Callable[[], bool], timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def send_entries(address: str, count: int, *, per_message: int = 10, tag: str = "") -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = als_pb2_grpc.AccessLogServiceStub(channel)

        async def messages() -> AsyncIterator[als_pb2.StreamAccessLogsMessage]:
            for start in range(0, count, per_message):
                message = als_pb2.StreamAccessLogsMessage()
                if start == 0:
                    message.identifier.node.id = "envoy-test"
                    message.identifier.log_name = "gatehouse"
                for n in range(start, min(count, start + per_message)):
                    entry = full_entry()
                    entry.request.request_id = f"{tag}req-{n}"
                    entry.request.path = f"/api/v2/orders/{n}"
                    message.http_logs.log_entry.append(entry)
                yield message

        await asyncio.wait_for(stub.StreamAccessLogs(messages()), 20)


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def access_accounted() -> float:
    return (sample("gatehouse_telemetry_access_sent_total")
            + sample("gatehouse_telemetry_access_dropped_total", reason="buffer_full")
            + sample("gatehouse_telemetry_access_dropped_total", reason="sink_error"))


async def test_als_entries_become_access_events(broker: KafkaBroker, process: TelemetryProcess) -> None:
    await send_entries(process.config.listen, 25)
    records = await broker.aconsume_records(ACCESS, expected=25, timeout=30)
    events = [json.loads(r.value) for r in records]
    assert sorted(e["request_id"] for e in events) == sorted(f"req-{n}" for n in range(25))
    first = next(e for e in events if e["request_id"] == "req-0")
    assert first["path"] == "/api/v2/orders/0"
    assert first["user_id"] == "alice" and first["status"] == 200 and first["method"] == "GET"
    assert first["route"] == "shop/orders" and first["upstream_host"] == "10.0.0.12:8080"
    assert first["latency_ms"] == {"total": 14.25, "upstream": 12.5, "auth": 0.412, "rate_limit": 0.35}
    assert first["rate_limit_remaining"] == 99 and first["response_flags"] == ["URX"]
    assert first["schema_version"] == 1 and first["type"] == "access"
    assert all(r.key is None for r in records)


def audit(n: int) -> AuditEvent:
    return AuditEvent(kind="revocation.revoked", actor="admin", subject=f"user-{n % 2}", jti=f"jti-{n}",
                      reason="test", details={"n": n})


async def test_outage_with_restart_loses_no_audit_event(
    broker: KafkaBroker, process: TelemetryProcess, tmp_path: Path
) -> None:
    cfg = config(broker, tmp_path)
    assert cfg.sink.kafka is not None
    sink = kafka_audit_sink(cfg.sink.kafka, cfg.audit, cfg.resolve(cfg.audit.spool_dir))
    await sink.start()
    events = [audit(n) for n in range(30)]
    for e in events[:5]:
        sink.emit(e)
    await until(lambda: sink.unacknowledged == 0, 20)
    await broker.aconsume_records(AUDIT, expected=5, timeout=30)

    await asyncio.to_thread(broker.kill)
    for e in events[5:15]:
        sink.emit(e)
    await until(lambda: sink.spooling, 30)
    accounted_before = access_accounted()
    await send_entries(process.config.listen, 200, tag="outage-")  # never blocks Envoy's side
    await sink.stop(drain_timeout=1.0)  # "process restart" while Kafka is away
    spool = tmp_path / "spool" / SPOOL_NAME
    assert spool.read_bytes().count(b"\n") == 10

    sink = kafka_audit_sink(cfg.sink.kafka, cfg.audit, cfg.resolve(cfg.audit.spool_dir))
    await sink.start()
    assert sink.spooling
    for e in events[15:]:
        sink.emit(e)
    await asyncio.to_thread(broker.restart)
    await until(lambda: not sink.spooling and sink.unacknowledged == 0, 60)
    assert spool.stat().st_size == 0
    records = await broker.aconsume_records(AUDIT, expected=30, timeout=60)
    bodies = [json.loads(r.value) for r in records]
    first_seen: dict[str, Any] = {}
    for body in bodies:
        first_seen.setdefault(body["event_id"], body)
    assert list(first_seen) == [e.event_id for e in events]  # all of them, in emit order
    assert [b["details"]["n"] for b in first_seen.values()] == list(range(30))
    assert all(r.key == f"user-{json.loads(r.value)['details']['n'] % 2}".encode() for r in records)
    await sink.stop()

    # Access events sent during the outage: each one was either dropped (and counted) or sent.
    await until(lambda: access_accounted() - accounted_before >= 200, 30)
    dropped = (sample("gatehouse_telemetry_access_dropped_total", reason="buffer_full")
               + sample("gatehouse_telemetry_access_dropped_total", reason="sink_error"))
    assert dropped > 0

    # And the access path recovers on its own once the broker is back.
    await send_entries(process.config.listen, 10, tag="after-")
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        values = [json.loads(r.value)["request_id"] for r in await broker.aconsume_records(ACCESS, expected=1, timeout=30)]
        if {f"after-req-{n}" for n in range(10)} <= set(values):
            break
        assert asyncio.get_running_loop().time() < deadline, "access events after the outage did not arrive"
        await asyncio.sleep(0.5)
