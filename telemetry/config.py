"""telemetry configuration (``telemetry.yaml``). Documented in docs/telemetry.md.

    listen: 127.0.0.1:8083                 # the AccessLogService gRPC endpoint Envoy streams to
    metrics: {listen: 127.0.0.1:9195}      # /healthz, /readyz, /metrics
    sink:                                  # exactly one of kafka, file, stdout
      kafka:
        bootstrapServers: [127.0.0.1:9092]
        accessLogTopic: gateway-access-log
        auditTopic: gateway-audit-log
        clientId: gatehouse-telemetry
        requestTimeout: 5s                 # every Kafka request and ack wait
        linger: 10ms
      # file: {path: /var/log/gatehouse/access.jsonl}
      # stdout: {}
    buffer: {maxEvents: 10000, batchSize: 500}
    audit: {spoolDir: /var/lib/gatehouse/audit-spool, maxPending: 10000, spoolMaxBytes: 1073741824}
    breakerTallies:                        # route breakers' counts to the control plane (optional)
      controlPlane: [http://gatehouse-control-plane:19000]   # its admin address; every replica
      everyAddress: false                  # true: each host names all replicas (a headless Service)
      credentialFile: /etc/gatehouse/breaker-tallies/credential
      flushInterval: 200ms
      timeout: 1s
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, model_validator

from servicekit.audit_output import Audit
from servicekit.durations import Duration, Millis
from servicekit.config_file import HostPort, Listen, load_config_file
from servicekit.kafka import KafkaSink
from servicekit.model import Model


class FileSink(Model):
    path: str


class StdoutSink(Model):
    pass


class Sink(Model):
    kafka: KafkaSink | None = None
    file: FileSink | None = None
    stdout: StdoutSink | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Sink:
        chosen = [name for name in ("kafka", "file", "stdout") if getattr(self, name) is not None]
        if len(chosen) != 1:
            raise ValueError(f"set exactly one of kafka, file, stdout (got {', '.join(chosen) or 'none'})")
        return self


class Buffer(Model):
    max_events: Annotated[int, Field(ge=1, le=10_000_000)] = 10_000
    batch_size: Annotated[int, Field(ge=1, le=100_000)] = 500


class BreakerTallies(Model):
    """Where the route breakers' tallies go (docs/circuit-breaker.md, "Detection")."""

    control_plane: Annotated[
        list[Annotated[str, Field(pattern=r"^https?://[^\s/]+(/[^\s]*)?$", max_length=512)]],
        Field(min_length=1, max_length=16),
    ]
    """The control plane's admin base URL, once per replica (each counts every tally)."""
    every_address: bool = False
    """Each URL's host is a name with one address per replica (a Kubernetes headless
    Service): resolved again every few seconds, every address gets each flush."""
    credential_file: Annotated[str, Field(min_length=1)]
    """The control plane's ``breakers.tallyCredentialFile`` credential; relative to this file."""
    flush_interval: Annotated[Duration, Field(ge=20, le=10_000)] = Millis(200)
    timeout: Annotated[Duration, Field(ge=10, le=30_000)] = Millis(1000)


class TelemetryConfig(Model):
    listen: HostPort = "127.0.0.1:8083"
    metrics: Listen = Listen(listen="127.0.0.1:9195")
    sink: Sink
    buffer: Buffer = Buffer()
    audit: Audit = Audit()
    breaker_tallies: BreakerTallies | None = None
    base_dir: Annotated[str, Field(exclude=True)] = "."

    def resolve(self, path: str) -> Path:
        candidate = Path(path)
        return candidate if candidate.is_absolute() else Path(self.base_dir) / candidate


def load_telemetry_config(path: Path) -> TelemetryConfig:
    return load_config_file(path, TelemetryConfig)
