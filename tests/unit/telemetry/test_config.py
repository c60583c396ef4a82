"""telemetry.yaml: defaults, exactly one sink, strict fields, paths relative to the file,
and the `gatehouse telemetry` command wiring."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from servicekit.errors import ConfigError
from gatehouse.commands import telemetry as command
from telemetry.config import load_telemetry_config
from telemetry.runtime import build_writer
from telemetry.writers import KafkaAccessWriter, LinesWriter

KAFKA = """
listen: 127.0.0.1:8083
metrics: {listen: 127.0.0.1:9195}
sink:
  kafka:
    bootstrapServers: [127.0.0.1:9092]
    requestTimeout: 2s
buffer: {maxEvents: 500}
audit: {spoolDir: spool}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "telemetry.yaml"
    path.write_text(text)
    return path


def test_kafka_config_with_defaults(tmp_path: Path) -> None:
    config = load_telemetry_config(write(tmp_path, KAFKA))
    kafka = config.sink.kafka
    assert kafka is not None
    assert kafka.access_log_topic == "gateway-access-log" and kafka.audit_topic == "gateway-audit-log"
    assert kafka.request_timeout == 2000 and kafka.linger == 10
    assert config.buffer.max_events == 500 and config.buffer.batch_size == 500
    assert config.resolve(config.audit.spool_dir) == tmp_path / "spool"
    assert isinstance(build_writer(config), KafkaAccessWriter)


def test_file_and_stdout_sinks(tmp_path: Path) -> None:
    config = load_telemetry_config(write(tmp_path, "sink: {file: {path: logs/access.jsonl}}\n"))
    writer = build_writer(config)
    assert isinstance(writer, LinesWriter)
    assert (tmp_path / "logs").is_dir()
    config = load_telemetry_config(write(tmp_path, "sink: {stdout: {}}\n"))
    assert isinstance(build_writer(config), LinesWriter)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sink: {}\n", "set exactly one of kafka, file, stdout (got none)"),
        ("sink: {stdout: {}, file: {path: x}}\n", "got file, stdout"),
        ("sink: {stdout: {}}\nbufer: {}\n", "bufer"),
        ("sink: {kafka: {bootstrapServers: []}}\n", "sink.kafka.bootstrapServers"),
        ("sink: {kafka: {bootstrapServers: [k:9092], requestTimeout: 5}}\n", "has no unit"),
        ("- a\n", "expected a mapping"),
    ],
)
def test_bad_configs_name_the_field(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_telemetry_config(write(tmp_path, text))
    assert message in str(info.value)


def test_command_parses_and_rejects_a_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    command.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["telemetry", "--config", str(write(tmp_path, "sink: {}\n")), "--log-format", "console"])
    assert args.run(args) == 2
    assert "exactly one" in capsys.readouterr().err


def test_public_api_is_sorted_and_importable() -> None:
    import telemetry

    assert telemetry.__all__ == sorted(telemetry.__all__)
    for name in telemetry.__all__:
        assert getattr(telemetry, name) is not None
