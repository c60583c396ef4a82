"""`gatehouse telemetry` as a real process with the file sink: /readyz, ALS entries → JSON
lines in the file, /metrics counts them, SIGTERM exits 0 after flushing."""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
import yaml
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc

from tests.harness.ports import free_port
from tests.harness.processes import ManagedProcess
from tests.unit.telemetry.entries import full_entry

REPO_ROOT = Path(__file__).resolve().parents[2]


def argv(config: Path) -> list[str]:
    return [sys.executable, "-m", "gatehouse", "telemetry", "--config", str(config)]


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except OSError:
        return 0, ""


class Telemetry:
    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.metrics_port = free_port()
        self.output = directory / "out" / "access.jsonl"
        config = {
            "listen": f"127.0.0.1:{self.port}",
            "metrics": {"listen": f"127.0.0.1:{self.metrics_port}"},
            "sink": {"file": {"path": "out/access.jsonl"}},
        }
        path = directory / "telemetry.yaml"
        path.write_text(yaml.safe_dump(config))
        self.process = ManagedProcess.start(argv(path), name="telemetry", log_dir=directory, cwd=REPO_ROOT)
        self.process.wait_until(lambda: get(self.metrics_port, "/readyz")[0] == 200, 30, "telemetry /readyz")


@pytest.fixture
def telemetry(tmp_path: Path) -> Iterator[Telemetry]:
    running = Telemetry(tmp_path)
    yield running
    running.process.stop()


async def test_file_sink_process(telemetry: Telemetry) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{telemetry.port}") as channel:
        stub = als_pb2_grpc.AccessLogServiceStub(channel)

        async def messages() -> AsyncIterator[als_pb2.StreamAccessLogsMessage]:
            for batch in range(4):
                message = als_pb2.StreamAccessLogsMessage()
                if batch == 0:
                    message.identifier.node.id = "envoy-0"
                for n in range(5):
                    entry = full_entry()
                    entry.request.request_id = f"r{batch * 5 + n}"
                    message.http_logs.log_entry.append(entry)
                yield message

        await asyncio.wait_for(stub.StreamAccessLogs(messages()), 10)
    deadline = asyncio.get_running_loop().time() + 10
    while not (telemetry.output.exists() and telemetry.output.read_bytes().count(b"\n") >= 20):
        assert asyncio.get_running_loop().time() < deadline, telemetry.process.log_tail()
        await asyncio.sleep(0.05)
    events = [json.loads(line) for line in telemetry.output.read_text().splitlines()]
    assert [e["request_id"] for e in events] == [f"r{n}" for n in range(20)]
    status, text = get(telemetry.metrics_port, "/metrics")
    assert status == 200
    assert "gatehouse_telemetry_access_received_total 20.0" in text
    assert "gatehouse_telemetry_access_sent_total 20.0" in text
    assert telemetry.process.stop() == 0


def test_bad_config_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "telemetry.yaml"
    path.write_text("sink: {}\n")
    process = ManagedProcess.start(argv(path), name="bad", log_dir=tmp_path, cwd=REPO_ROOT)
    process.wait_until(lambda: not process.alive(), 20, "exit")
    assert process.stop() == 2  # already exited: stop() only reaps it
    assert "exactly one of kafka, file, stdout" in process.log_tail()
