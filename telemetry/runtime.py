"""The telemetry process: ALS gRPC → bounded buffer → sink (Kafka, file or stdout), /metrics.

Readiness (GET /readyz on the metrics port): the ALS gRPC server is listening. Kafka is
not part of readiness: telemetry runs as a sidecar, and an unready sidecar would take
the whole gateway pod out of service over a log pipeline. Kafka trouble shows in the
``/readyz`` text, in ``gatehouse_telemetry_kafka_errors_total`` and in the drop counters.
The gRPC health service (grpc.health.v1) on the ALS port follows readiness (see
servicekit/grpc_serving.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from pathlib import Path

import grpc
import structlog
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc

from servicekit.admin_http import AdminServer
from servicekit.grpc_serving import GrpcServing, service_full_name
from telemetry.als import AccessLogService
from telemetry.breaker_flush import TallyFlusher
from telemetry.breaker_tallies import BreakerTallies
from telemetry.buffer import EventBuffer
from servicekit.bearer import read_bearer_credential
from servicekit.kafka import KafkaSink
from telemetry.config import TelemetryConfig
from servicekit.kafka import ProducerFactory, aiokafka_factory
from telemetry.writers import AccessLogPipeline, EventWriter, KafkaAccessWriter, LinesWriter

log = structlog.get_logger(component="telemetry")

SERVICE_NAME = service_full_name(als_pb2.DESCRIPTOR, "AccessLogService")


def access_producer_factory(kafka: KafkaSink) -> ProducerFactory:
    """acks=1, lz4, linger ~10ms: throughput first, an access event is best effort."""
    return aiokafka_factory(
        bootstrap_servers=kafka.bootstrap_servers,
        client_id=f"{kafka.client_id}-access",
        acks=1,
        idempotent=False,
        linger_ms=kafka.linger,
        request_timeout_ms=kafka.request_timeout,
        compression="lz4",
        max_batch_size=256 * 1024,
    )


def build_writer(config: TelemetryConfig) -> EventWriter:
    sink = config.sink
    if sink.kafka is not None:
        return KafkaAccessWriter(
            access_producer_factory(sink.kafka),
            topic=sink.kafka.access_log_topic,
            send_timeout=sink.kafka.request_timeout.seconds,
            retry_backoff=sink.kafka.retry_backoff.seconds,
        )
    if sink.file is not None:
        return LinesWriter.to_file(config.resolve(sink.file.path))
    return LinesWriter.to_stdout()


class TelemetryProcess:
    def __init__(self, config: TelemetryConfig) -> None:
        self.config = config
        self.buffer = EventBuffer(max_events=config.buffer.max_events)
        self.writer = build_writer(config)
        self.listening = False
        self.tallies = BreakerTallies()
        tally = config.breaker_tallies
        self.flusher = (
            TallyFlusher(
                self.tallies,
                urls=tally.control_plane,
                credential=read_bearer_credential(config.resolve(tally.credential_file)),
                interval=tally.flush_interval.seconds,
                timeout=tally.timeout.seconds,
                every_address=tally.every_address,
            )
            if tally is not None
            else None
        )

    def readiness(self) -> tuple[bool, str]:
        if not self.listening:
            return False, "access log service not listening yet"
        return True, "ready" if self.writer.healthy else "ready (sink unavailable: access events are being dropped)"

    async def run(self) -> None:
        config = self.config
        server = grpc.aio.server()
        als_pb2_grpc.add_AccessLogServiceServicer_to_server(AccessLogService(self.buffer, self.tallies), server)
        try:
            server.add_insecure_port(config.listen)
        except RuntimeError as exc:
            raise OSError(f"cannot listen for access logs on {config.listen}: {exc}") from exc
        serving = GrpcServing(server, [SERVICE_NAME], self.readiness, what="telemetry")
        http = AdminServer(config.metrics.listen, readiness=self.readiness)
        await self.writer.start()
        pipeline = asyncio.create_task(
            AccessLogPipeline(self.buffer, self.writer, batch_size=config.buffer.batch_size).run(), name="access-log"
        )
        flusher = asyncio.create_task(self.flusher.run(), name="breaker-tallies") if self.flusher else None
        await serving.start()
        await http.start()
        self.listening = True
        await serving.refresh()  # SERVING now, not at the next poll
        log.info("telemetry_started", listen=config.listen, sink=_sink_name(config))
        # No collection first: it would hold the loop (gatehouse/commands/serve.py collects before it starts).
        gc.freeze()
        try:
            await asyncio.Event().wait()
        finally:
            self.listening = False
            await serving.stop(grace=1.0)
            pipeline.cancel()
            if flusher is not None:
                flusher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await flusher
            try:
                await pipeline
            except asyncio.CancelledError:
                pass
            await self.writer.close()
            await http.stop()


def _sink_name(config: TelemetryConfig) -> str:
    sink = config.sink
    if sink.kafka is not None:
        return "kafka:" + ",".join(sink.kafka.bootstrap_servers)
    if sink.file is not None:
        return f"file:{Path(sink.file.path)}"
    return "stdout"
