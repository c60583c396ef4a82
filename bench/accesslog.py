"""Access logs through real Envoy → telemetry → Kafka, beside the same gateway with no access
log, all measured in the same run with ``wrk``.

One Kafka 4.1 broker (KRaft, ``tests/harness/kafka.py``) with the topic ``gateway-access-log``,
one telemetry service (``python -m gatehouse telemetry``, Kafka sink) and two gateways
(control plane, Envoy ``--concurrency 1``, one Python/aiohttp echo upstream each) with the
same two routes, ``auth.required: false`` (no ext_authz in either stack):

    /direct   disabled: {status: 200, body: ok}   (Envoy answers itself: Envoy's ceiling)
    /echo     proxied to the echo upstream

- gateway ``off``: no ``accessLog`` block (the baseline);
- gateway ``on``: ``accessLog: {address: <telemetry>, bufferSize: 16384, flushInterval: 1s}``:
  Envoy's http_grpc access logger on the listener, one entry per request, streamed to telemetry,
  which converts each entry to a JSON event and produces it to Kafka (acks=1, lz4).

Four scenarios, each one ``wrk --latency`` run of ``--duration`` per round: ``off_direct``,
``on_direct``, ``off_echo``, ``on_echo``. ``--rounds`` (default 2) repeats them, off before on
in odd rounds and on before off in even ones. The summary takes the least disturbed round
(highest requests/s, lowest percentiles) and lists on − off within each round. For each: requests/s, latency percentiles, Envoy's
(and the upstream's) CPU per request. For the log-on runs, after wrk stops the script waits
until the pipeline is quiet (Envoy flushed its buffer, telemetry drained its buffer, Kafka's
end offset stopped moving), then reads:

- entries into Kafka: the delta of the topic's end offset, cross-checked with telemetry's
  ``gatehouse_telemetry_access_{received,sent}_total`` deltas and Envoy's
  ``access_logs.grpc_access_log.logs_written``;
- drops: ``gatehouse_telemetry_access_dropped_total{reason}`` and Envoy's
  ``access_logs.grpc_access_log.logs_dropped``;
- telemetry's CPU (utime+stime from /proc/<pid>/stat, all threads) from the start of the load
  until the pipeline is quiet → entries per second per core, µs CPU per entry; Kafka's too.

``conversion_in_process`` times ``telemetry.access_event.access_event`` (entry → JSON bytes)
in this process, with ``HTTPAccessLogEntry`` protos built like ``tests/unit/telemetry/entries.py``
and like the entries Envoy sends for the two routes, plus parsing a
``StreamAccessLogsMessage`` of a batch of them (gRPC's deserialization, per entry).

    .venv/bin/python -m bench.accesslog > bench/results/accesslog.json    # 2 rounds × 8 s per scenario, ~2 min
    .venv/bin/python -m bench.accesslog --quick                           # 1 round × 4 s, ~45 s

One JSON document goes to stdout; progress to stderr. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.kit.machine import command_output, describe
from bench.kit.metrics import delta, samples
from bench.kit.processes import CpuWindow, machine_costs, request_costs
from bench.kit.run import Bench, Progress, Run, Scenario, add_workdir_arguments, chosen
from bench.kit.stats import median, ratio
from bench.kit.wrk import LUA_DONE, add_wrk_arguments, check_wrk_arguments, require_wrk, run_wrk, wrk_command, wrk_settings
from tests.harness.gateway import GatewayStack
from tests.harness.kafka import KafkaBroker, kafka_version
from tests.harness.route_repo import route_doc
from tests.harness.telemetry import TelemetryServiceProcess

ENVOY_CONCURRENCY = 1
"""tests/harness/envoy.py starts Envoy with --concurrency 1: one worker thread."""
TOPIC = "gateway-access-log"
ENVOY_ALS_PREFIX = "access_logs.grpc_access_log."
TELEMETRY_COUNTERS = {
    "received": "gatehouse_telemetry_access_received_total",
    "sent": "gatehouse_telemetry_access_sent_total",
    "dropped": "gatehouse_telemetry_access_dropped_total",
    "kafka_errors": "gatehouse_telemetry_kafka_errors_total",
}


progress = Progress("accesslog")


# -- process readings -------------------------------------------------------------------


def telemetry_counters(telemetry: TelemetryServiceProcess) -> dict[str, float]:
    """``received``, ``sent``, ``dropped|<reason>``, ``kafka_errors|<sink>|<reason>`` and the
    ``buffered`` gauge, from telemetry's /metrics."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{telemetry.metrics_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for name, labels, value in samples(text, "gatehouse_telemetry_"):
        if name == TELEMETRY_COUNTERS["received"]:
            values["received"] = value
        elif name == TELEMETRY_COUNTERS["sent"]:
            values["sent"] = value
        elif name == TELEMETRY_COUNTERS["dropped"]:
            values[f"dropped|{labels.get('reason')}"] = value
        elif name == TELEMETRY_COUNTERS["kafka_errors"]:
            values[f"kafka_errors|{labels.get('sink')}|{labels.get('reason')}"] = value
        elif name == "gatehouse_telemetry_access_buffered":
            values["buffered"] = value
    return values


def counter_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, int]:
    """Telemetry's counters that moved (the ``buffered`` gauge left out)."""
    return {k: int(v) for k, v in delta(before, after).items() if k != "buffered"}


def envoy_als_stats(stack: GatewayStack) -> dict[str, int]:
    """Envoy's gRPC access logger counters (``access_logs.grpc_access_log.*``) and the
    access-log cluster's request/connection counters."""
    assert stack.envoy is not None
    stats = stack.envoy.stats(r"access_log")
    return {name: value for name, value in stats.items()
            if name.startswith(ENVOY_ALS_PREFIX) or (name.startswith("cluster.gatehouse_access_log.") and name.endswith(
                ("upstream_rq_total", "upstream_cx_total", "upstream_cx_destroy", "upstream_rq_active", "upstream_cx_tx_bytes_total")))}


class TopicOffsets:
    """The end offset (records ever written) of the access-log topic, summed over partitions,
    with one long-lived aiokafka consumer on this script's own event loop."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.loop = asyncio.new_event_loop()
        self.consumer: Any = None
        self.partitions: list[Any] = []

    def start(self) -> None:
        self.loop.run_until_complete(self._start())

    async def _start(self) -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        self.consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False,
                                         request_timeout_ms=5000)
        await self.consumer.start()
        partitions = self.consumer.partitions_for_topic(self.topic)
        if not partitions:
            await self.consumer._client.force_metadata_update()
            partitions = self.consumer.partitions_for_topic(self.topic) or {0}
        self.partitions = [TopicPartition(self.topic, p) for p in sorted(partitions)]

    def end(self) -> int:
        ends = self.loop.run_until_complete(self.consumer.end_offsets(self.partitions))
        return int(sum(ends.values()))

    def sample(self, offset: int, n: int = 1) -> list[bytes]:
        """``n`` records of the first partition from ``offset`` (a look at real events)."""

        async def read() -> list[bytes]:
            tp = self.partitions[0]
            self.consumer.assign([tp])
            self.consumer.seek(tp, offset)
            values: list[bytes] = []
            deadline = time.monotonic() + 10
            while len(values) < n and time.monotonic() < deadline:
                for batch in (await self.consumer.getmany(timeout_ms=500)).values():
                    values.extend(r.value for r in batch)
            return values[:n]

        return self.loop.run_until_complete(read())

    def close(self) -> None:
        try:
            if self.consumer is not None:
                self.loop.run_until_complete(self.consumer.stop())
        except asyncio.CancelledError:  # Kafka was killed (the outage): a fetch was cancelled mid-retry
            pass
        finally:
            self.loop.close()


# -- scenarios --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class LogScenario(Scenario):
    log: bool
    """On the gateway with the access log (else the one without)."""


SCENARIOS = [
    LogScenario("off_direct", "/direct", "Envoy direct response, no access log: Envoy's ceiling", log=False),
    LogScenario("on_direct", "/direct", "Envoy direct response, access log → telemetry → Kafka", log=True),
    LogScenario("off_echo", "/echo", "proxied to the echo upstream, no access log: the baseline", log=False),
    LogScenario("on_echo", "/echo", "proxied to the echo upstream, access log → telemetry → Kafka", log=True),
]
BY_NAME = {s.name: s for s in SCENARIOS}


def routes() -> list[dict[str, Any]]:
    public = {"required": False}
    return [
        route_doc("direct", {"match": {"pathPrefix": "/direct"}, "disabled": {"status": 200, "body": "ok"}, "auth": public}),
        route_doc("echo", {"match": {"pathPrefix": "/echo"}, "backends": [{"service": "svc-a", "port": 8080}], "auth": public}),
    ]


# -- entry → event, in this process -------------------------------------------------------


def _envoy_like_entry(direct: bool) -> Any:
    """An HTTPAccessLogEntry shaped like what Envoy's http_grpc logger sends for this bench's
    routes (wrk's request: no user agent, no trace headers, no user)."""
    from envoy.data.accesslog.v3 import accesslog_pb2

    entry = accesslog_pb2.HTTPAccessLogEntry()
    common = entry.common_properties
    common.start_time.seconds = int(time.time())
    common.start_time.nanos = 987_654_321
    common.downstream_remote_address.socket_address.address = "127.0.0.1"
    common.downstream_remote_address.socket_address.port_value = 51000
    common.downstream_local_address.socket_address.address = "127.0.0.1"
    common.downstream_local_address.socket_address.port_value = 10000
    common.time_to_last_rx_byte.nanos = 20_000
    common.time_to_first_downstream_tx_byte.nanos = 400_000
    common.time_to_last_downstream_tx_byte.nanos = 420_000
    common.route_name = "default/direct" if direct else "default/echo"
    if not direct:
        common.upstream_remote_address.socket_address.address = "127.0.0.1"
        common.upstream_remote_address.socket_address.port_value = 40123
        common.upstream_local_address.socket_address.address = "127.0.0.1"
        common.upstream_local_address.socket_address.port_value = 50234
        common.upstream_cluster = "default/svc-a:8080"
        common.time_to_first_upstream_tx_byte.nanos = 60_000
        common.time_to_last_upstream_tx_byte.nanos = 60_000
        common.time_to_first_upstream_rx_byte.nanos = 1_300_000
        common.time_to_last_upstream_rx_byte.nanos = 1_320_000
    entry.protocol_version = accesslog_pb2.HTTPAccessLogEntry.HTTP11
    request = entry.request
    request.request_method = 1  # GET
    request.scheme = "http"
    request.authority = "127.0.0.1:10000"
    request.path = "/direct" if direct else "/echo"
    request.request_id = "5f1c1f2e-0a9e-4f6b-9c9d-2b3c4d5e6f70"
    request.request_headers_bytes = 60
    entry.response.response_code.value = 200
    entry.response.response_headers_bytes = 120
    entry.response.response_body_bytes = 2 if direct else 300
    return entry


def conversion_in_process(n: int) -> dict[str, Any]:
    """CPU µs per entry of ``access_event`` (entry → JSON bytes, what telemetry does per entry),
    of its two halves (``access_event_dict`` and the JSON encode), and of parsing a
    ``StreamAccessLogsMessage`` carrying a batch of such entries (gRPC's deserialization)."""
    from envoy.service.accesslog.v3 import als_pb2

    from telemetry.access_event import access_event_dict
    from telemetry.access_event import encode_access_event as access_event
    from tests.unit.telemetry.entries import full_entry

    _encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, check_circular=False).encode  # as telemetry's

    cases = {"full_entry (tests/unit/telemetry/entries.py)": full_entry(),
             "envoy_like_direct": _envoy_like_entry(True), "envoy_like_echo": _envoy_like_entry(False)}
    results: dict[str, Any] = {}
    for name, entry in cases.items():
        for _ in range(min(n, 500)):
            access_event(entry)
        rounds = []
        for _ in range(3):  # best of three: the machine is shared
            started = time.process_time()
            for _ in range(n):
                access_event(entry)
            rounds.append(time.process_time() - started)
        best = min(rounds)
        dicts = [access_event_dict(entry) for _ in range(min(n, 2000))]
        started = time.process_time()
        for _ in range(n):
            access_event_dict(entry)
        dict_s = time.process_time() - started
        started = time.process_time()
        for d in dicts:
            _encode(d).encode()
        encode_s = (time.process_time() - started) * n / len(dicts)
        message = als_pb2.StreamAccessLogsMessage()
        message.http_logs.log_entry.extend([entry] * 100)
        blob = message.SerializeToString()
        parse = als_pb2.StreamAccessLogsMessage.FromString
        batches = max(1, n // 100)
        started = time.process_time()
        for _ in range(batches):
            parse(blob)
        parse_s = time.process_time() - started
        event = access_event(entry)
        results[name] = {
            "n": n,
            "function": "telemetry.access_event.encode_access_event",
            "access_event_cpu_us": round(best * 1e6 / n, 2),
            "access_event_cpu_us_rounds": [round(r * 1e6 / n, 2) for r in rounds],
            "access_event_dict_cpu_us": round(dict_s * 1e6 / n, 2),
            "json_encode_cpu_us": round(encode_s * 1e6 / n, 2),
            "entries_per_s_per_core": round(n / best) if best else None,
            "als_message_parse_cpu_us_per_entry": round(parse_s * 1e6 / (batches * 100), 2),
            "entry_proto_bytes": entry.ByteSize(),
            "event_json_bytes": len(event),
        }
    return results


def producer_in_process(bootstrap: str, n: int, batch_size: int) -> dict[str, Any]:
    """CPU µs per event of telemetry's Kafka writer alone: ``KafkaAccessWriter`` with the
    process's own producer settings (``access_producer_factory``: acks=1, lz4, linger 10ms),
    fed batches of ``batch_size`` ready events in this process until Kafka acknowledged all
    ``n``, on a topic of its own. No gRPC, no conversion: aiokafka's send, batching, lz4 and
    ack handling, and the writer's per-record await."""
    from telemetry import metrics
    from servicekit.kafka import KafkaSink
    from telemetry.runtime import access_producer_factory
    from telemetry.writers import KafkaAccessWriter

    from telemetry.access_event import encode_access_event

    event = encode_access_event(_envoy_like_entry(False))
    topic = "bench-producer-in-process"

    async def measure() -> dict[str, Any]:
        sink = KafkaSink.model_validate({"bootstrapServers": [bootstrap], "accessLogTopic": topic})
        writer = KafkaAccessWriter(access_producer_factory(sink), topic=topic, send_timeout=5.0)
        await writer.start()
        try:
            sent = metrics.ACCESS_SENT
            warm = min(n, 2000)
            base = sent._value.get()
            for i in range(0, warm, batch_size):
                await writer.write([event] * min(batch_size, warm - i))
            while sent._value.get() - base < warm:
                await asyncio.sleep(0.005)
            base = sent._value.get()
            wall, cpu = time.perf_counter(), time.process_time()
            for i in range(0, n, batch_size):
                await writer.write([event] * min(batch_size, n - i))
            handed_cpu = time.process_time() - cpu
            deadline = time.monotonic() + 60
            while sent._value.get() - base < n and time.monotonic() < deadline:
                await asyncio.sleep(0.002)
            cpu_s, wall_s = time.process_time() - cpu, time.perf_counter() - wall
            acked = int(sent._value.get() - base)
        finally:
            await writer.close()
        return {"n": n, "batch_size": batch_size, "acknowledged": acked, "event_bytes": len(event),
                "cpu_us_per_event": round(cpu_s * 1e6 / n, 2), "send_loop_cpu_us_per_event": round(handed_cpu * 1e6 / n, 2),
                "wall_s": round(wall_s, 3), "events_per_s_per_core": round(n / cpu_s) if cpu_s else None,
                "note": "this process's CPU (time.process_time) from the first write until Kafka acknowledged every "
                        "event; the 2 ms polling for the acks is in it"}

    return asyncio.run(measure())


# -- the run ----------------------------------------------------------------------------


class LogBench(Bench):
    def __init__(self, args: argparse.Namespace, run: Run) -> None:
        super().__init__(args, run)
        workdir = self.workdir
        self.broker: KafkaBroker | None = None
        self.telemetry: TelemetryServiceProcess | None = None
        self.stacks: dict[bool, GatewayStack] = {}
        self.offsets: TopicOffsets | None = None
        self.report_lua = workdir / "report.lua"
        self.report_lua.write_text(LUA_DONE)

    # setup / teardown

    def _gateway(self, name: str, extra: dict[str, Any] | None) -> GatewayStack:
        stack = self.stacks[extra is not None] = self.gateway(name, routes(), wait_path="/direct", extra=extra)
        stack.wait_status("/echo", 200)
        return stack

    def start(self) -> dict[str, Any]:
        timings: dict[str, float] = {}
        started = time.monotonic()
        self.broker = self.parts.add(KafkaBroker.start(self.workdir / "kafka"))
        self.broker.create_topic(TOPIC)
        timings["kafka_s"] = round(time.monotonic() - started, 2)
        mark = time.monotonic()
        sink = {"kafka": {"bootstrapServers": [self.broker.bootstrap], "accessLogTopic": TOPIC}}
        extra = {"buffer": {"maxEvents": self.args.max_events, "batchSize": self.args.batch_size}}
        self.telemetry = self.parts.add(TelemetryServiceProcess(self.workdir / "telemetry", sink=sink, extra=extra)).start()
        timings["telemetry_s"] = round(time.monotonic() - mark, 2)
        mark = time.monotonic()
        self._gateway("gateway-off", None)
        access_log = {"address": self.telemetry.address, "bufferSize": self.args.envoy_buffer_size,
                      "flushInterval": self.args.flush_interval}
        on = self._gateway("gateway-on", {"accessLog": access_log})
        timings["gateways_s"] = round(time.monotonic() - mark, 2)
        self.offsets = TopicOffsets(self.broker.bootstrap, TOPIC)
        self.parts.on_stop(self.offsets.close, "the offsets consumer")
        self.offsets.start()
        # The first entries reach Kafka: the whole pipeline works before anything is measured.
        deadline = time.monotonic() + 30
        while self.offsets.end() == 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no access event reached Kafka within 30 s; telemetry: {telemetry_counters(self.telemetry)}; "
                                   f"envoy: {envoy_als_stats(on)}")
            on.get("/direct")
            time.sleep(0.2)
        timings["first_event_in_kafka_s"] = round(time.monotonic() - mark, 2)
        timings["total_s"] = round(time.monotonic() - started, 2)
        assert self.telemetry.process is not None and self.broker.pid is not None
        return {"start": timings, "telemetry_pid": self.telemetry.process.pid, "kafka_pid": self.broker.pid,
                "telemetry_threads": len(list(Path(f"/proc/{self.telemetry.process.pid}/task").iterdir())),
                "kafka_bootstrap": self.broker.bootstrap}

    # the pipeline

    def pipeline_state(self) -> tuple[int, dict[str, float], dict[str, int]]:
        assert self.offsets is not None and self.telemetry is not None
        return self.offsets.end(), telemetry_counters(self.telemetry), envoy_als_stats(self.stacks[True])

    def wait_quiet(self, timeout: float = 60.0) -> tuple[float, tuple[int, dict[str, float], dict[str, int]]]:
        """Poll until Kafka's end offset, telemetry's counters and Envoy's ALS counters have not
        moved for longer than Envoy's flush interval and telemetry's buffer is empty.
        Returns (seconds from the call until the last change seen, the final state)."""
        quiet_for = self.args.flush_interval_s + 0.6
        started = last_change = time.monotonic()
        state = self.pipeline_state()
        while True:
            time.sleep(0.1)
            now_state = self.pipeline_state()
            now = time.monotonic()
            comparable = (now_state[0], {k: v for k, v in now_state[1].items()}, now_state[2])
            if comparable != state:
                state, last_change = comparable, now
            elif now - last_change >= quiet_for and state[1].get("buffered", 0) == 0:
                return last_change - started, state
            if now - started > timeout:
                progress(f"  WARNING: the access-log pipeline was still moving after {timeout:.0f} s")
                return last_change - started, state

    # one wrk run

    def wrk(self, scenario: LogScenario, duration: int, log_name: str) -> dict[str, Any]:
        stack = self.stacks[scenario.log]
        url = f"http://127.0.0.1:{stack.listener_port}{scenario.path}"
        argv = wrk_command(url, threads=self.args.threads, connections=self.args.connections, duration=duration, script=self.report_lua)
        return run_wrk(argv, duration, self.workdir, log_name)

    def outage(self, duration: int) -> dict[str, Any]:
        """Kafka SIGKILLed: log-off and log-on gateways under the same load, back to back.
        Requests must not fail or slow down; telemetry drops and counts what it cannot send."""
        assert self.broker is not None and self.telemetry is not None
        before = telemetry_counters(self.telemetry)
        self.broker.kill()
        time.sleep(1.0)
        runs = {s.name: self.wrk(s, duration, f"outage-{s.name}") for s in (BY_NAME["off_echo"], BY_NAME["on_echo"])}
        time.sleep(self.args.flush_interval_s + 1)
        dropped = {k.split("|", 1)[1]: v for k, v in counter_delta(before, telemetry_counters(self.telemetry)).items()
                   if k.startswith("dropped|")}
        off, on = runs["off_echo"], runs["on_echo"]
        result = {
            "what": "Kafka killed; /echo through the gateway without and with the access log, back to back",
            **{name: {k: run[k] for k in ("requests", "rps", "latency_ms", "status_errors", "socket_errors")}
               for name, run in runs.items()},
            "p50_ratio_on_over_off": ratio(on["latency_ms"]["p50"], off["latency_ms"]["p50"]),
            "p99_ratio_on_over_off": ratio(on["latency_ms"]["p99"], off["latency_ms"]["p99"]),
            "rps_ratio_on_over_off": ratio(on["rps"], off["rps"]),
            "failed_requests_with_log_on": on["status_errors"] + sum(on["socket_errors"].values()),
            "telemetry_dropped": dropped,
        }
        progress(f"  outage: p99 on/off {result['p99_ratio_on_over_off']}, failed {result['failed_requests_with_log_on']}, "
                 f"dropped {dropped}")
        return result

    def warm_up(self, wanted: list[LogScenario]) -> None:
        for scenario in wanted:
            self.wrk(scenario, self.args.warmup, f"warmup-{scenario.name}")
        if any(s.log for s in wanted):
            self.wait_quiet()

    def run(self, scenario: LogScenario, round_no: int = 1) -> dict[str, Any]:
        stack = self.stacks[scenario.log]
        assert stack.envoy is not None and self.telemetry is not None and self.telemetry.process is not None and self.broker is not None
        reply = stack.get(scenario.path)
        if reply.status != 200:
            raise RuntimeError(f"{scenario.name}: {scenario.path} answered {reply.status}: {reply.body[:300]!r}")
        telemetry_pid, kafka_pid = self.telemetry.process.pid, self.broker.pid
        assert kafka_pid is not None
        envoy_pid, upstream_pid = stack.envoy.pid, stack.upstreams["svc-a"].pid
        if scenario.log:
            self.wait_quiet()  # the preflight's entry (and anything before) is in Kafka already
        offset_before, tele_before, envoy_before = self.pipeline_state()
        cpu_window = CpuWindow({"telemetry": telemetry_pid, "kafka": kafka_pid, "envoy": envoy_pid, "upstream": upstream_pid})
        load = self.wrk(scenario, self.args.duration, f"{scenario.name}-round{round_no}")
        cpu_load = cpu_window.used()
        load_wall = cpu_load["wall"]
        requests = load["requests"]
        result: dict[str, Any] = {"name": scenario.name, "round": round_no, "path": scenario.path, "access_log": scenario.log,
                                  "description": scenario.description, **load}
        warnings: list[str] = []
        if load["status_errors"] or load["socket_errors"]:
            warnings.append(f"wrk saw {load['status_errors']} status errors and socket errors {load['socket_errors']}")
        cpu_total = dict(cpu_load)
        if scenario.log:
            drain_s, (offset_after, tele_after, envoy_after) = self.wait_quiet()
            cpu_total = cpu_window.used()
            window = cpu_total["wall"]  # load + drain + the quiet tail
            entries = offset_after - offset_before
            tele = counter_delta(tele_before, tele_after)
            envoy = {k.removeprefix(ENVOY_ALS_PREFIX): v - envoy_before.get(k, 0) for k, v in envoy_after.items()
                     if v - envoy_before.get(k, 0)}
            dropped = {k.split("|", 1)[1]: v for k, v in tele.items() if k.startswith("dropped|")}
            envoy_dropped = envoy.get("logs_dropped", 0)
            telemetry_cpu = cpu_total["telemetry"]
            result["access_log_pipeline"] = {
                "entries_into_kafka": entries,
                "entries_counted_by": "end offset delta of the topic (all partitions)",
                "telemetry_received": tele.get("received", 0),
                "telemetry_sent": tele.get("sent", 0),
                "telemetry_dropped": dropped,
                "kafka_errors": {k.split("|", 1)[1]: v for k, v in tele.items() if k.startswith("kafka_errors|")},
                "envoy_als": envoy,
                "envoy_logs_dropped": envoy_dropped,
                "envoy_logs_dropped_stat_present": ENVOY_ALS_PREFIX + "logs_dropped" in envoy_after,
                "entries_minus_requests": entries - requests,
                "sent_equals_offset_delta": tele.get("sent", 0) == entries,
                "drain_after_load_s": round(max(0.0, drain_s), 2),
                "entries_per_s": round(entries / load["duration_s"], 1),
                "entries_per_s_incl_drain": round(entries / (load_wall + max(0.0, drain_s)), 1),
                "telemetry_cpu_s": round(telemetry_cpu, 3),
                "telemetry_cores": round(telemetry_cpu / (load_wall + max(0.0, drain_s)), 3),
                "telemetry_cpu_us_per_entry": round(telemetry_cpu * 1e6 / entries, 1) if entries else None,
                "entries_per_s_per_core": round(entries / telemetry_cpu) if telemetry_cpu else None,
                "telemetry_cpu_us_per_received_entry": round(telemetry_cpu * 1e6 / tele["received"], 1) if tele.get("received") else None,
                "received_per_s_per_core": round(tele.get("received", 0) / telemetry_cpu) if telemetry_cpu else None,
                "kafka_cpu_s": round(cpu_total["kafka"], 3),
                "kafka_cpu_us_per_entry": round(cpu_total["kafka"] * 1e6 / entries, 1) if entries else None,
                "pipeline_window_s": round(load_wall + max(0.0, drain_s), 3),
                "kafka_cores": round(cpu_total["kafka"] / (load_wall + max(0.0, drain_s)), 3),
                "cpu_window_s": round(window, 2),
                "note": "CPU from the start of the load until the pipeline was quiet (Envoy flushed, telemetry's buffer "
                        "empty, end offset stable for flushInterval + 0.6 s); wrk counts completed requests, and up to one "
                        "request per connection was in flight (served and logged, not counted) when wrk stopped",
            }
            if entries and len(self.offsets.partitions) == 1:  # type: ignore[union-attr]
                try:  # one event from the middle of the run (the last ones are the requests wrk cut off)
                    result["sample_event"] = json.loads(self.offsets.sample(offset_before + entries // 2)[0])  # type: ignore[union-attr]
                except Exception as exc:
                    result["sample_event"] = f"could not read: {exc!r}"
            if dropped or envoy_dropped:
                warnings.append(f"access log entries dropped: telemetry {dropped}, Envoy logs_dropped {envoy_dropped}")
            lost = requests - entries - sum(dropped.values()) - envoy_dropped
            if lost > 2 or entries - requests > self.args.connections + 2:
                warnings.append(f"entries into Kafka ({entries}) do not match requests ({requests}) after counted drops")
            if tele.get("sent", 0) != entries:
                warnings.append(f"telemetry's sent counter ({tele.get('sent', 0)}) differs from the offset delta ({entries})")
        else:
            # Telemetry is idle during a log-off run: its CPU here is its floor.
            result["telemetry_idle_cores"] = round(cpu_load["telemetry"] / load_wall, 4)
        result["cpu"] = {
            **request_costs(cpu_load, ("envoy", "upstream", "wrk"), requests),
            "envoy_us_per_request_incl_flush": round(cpu_total["envoy"] * 1e6 / max(1, requests), 1),
            "telemetry_cores_during_load": round(cpu_load["telemetry"] / load_wall, 3),
            "kafka_cores_during_load": round(cpu_load["kafka"] / load_wall, 3),
            "machine_us_per_request": round(cpu_load["machine"] * 1e6 / max(1, requests), 1),
            "stack_us_per_request": round(sum(cpu_total[k] for k in ("envoy", "upstream", "telemetry", "kafka")) * 1e6 / max(1, requests), 1),
            **machine_costs(cpu_load, ("telemetry", "kafka", "envoy", "upstream", "wrk"), cpu_window.load_average),
        }
        if warnings:
            result["warning"] = "; ".join(warnings)
        line = (f"  {scenario.name:<11} r{round_no} {load['rps']:>9.1f} req/s  p50 {load['latency_ms']['p50']:.2f} ms  "
                f"p99 {load['latency_ms']['p99']:.2f} ms  envoy {result['cpu']['envoy_us_per_request']} us/req")
        if scenario.log:
            p = result["access_log_pipeline"]
            line += (f"  entries {p['entries_into_kafka']} (requests {requests}, sent {p['telemetry_sent']}, "
                     f"dropped {p['telemetry_dropped'] or 0}/{p['envoy_logs_dropped']})  telemetry {p['telemetry_cpu_us_per_entry']} us/entry "
                     f"= {p['entries_per_s_per_core']} entries/s/core  drain {p['drain_after_load_s']} s")
        progress(line + (f"  WARNING {result['warning']}" if warnings else ""))
        return result


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One scenario over its rounds. Other processes on a shared machine only ever slow a run
    down, so the least disturbed round is the best estimate: the highest requests/s and the
    lowest of each percentile (taken per percentile). CPU per request is the median. Pipeline
    counts and CPU are summed over the rounds (per-entry figures from the totals). Every
    round's own value is kept next to it."""
    first = runs[0]
    result: dict[str, Any] = {
        "name": first["name"], "access_log": first["access_log"], "rounds": len(runs),
        "requests": sum(r["requests"] for r in runs),
        "rps": round(max(r["rps"] for r in runs), 1),
        "rps_rounds": [r["rps"] for r in runs],
        "latency_ms": {p: round(min(r["latency_ms"][p] for r in runs), 3) for p in ("p50", "p90", "p99", "p99.9")},
        "p99_ms_rounds": [r["latency_ms"]["p99"] for r in runs],
        "cpu": {k: median([r["cpu"][k] for r in runs], 3) for k in
                ("envoy_us_per_request", "upstream_us_per_request", "stack_us_per_request", "machine_us_per_request",
                 "other_processes_cores")},
    }
    pipes = [r["access_log_pipeline"] for r in runs if "access_log_pipeline" in r]
    if pipes:
        entries = sum(p["entries_into_kafka"] for p in pipes)
        tele_cpu = sum(p["telemetry_cpu_s"] for p in pipes)
        received = sum(p["telemetry_received"] for p in pipes)
        window = sum(p["pipeline_window_s"] for p in pipes)
        load_s = sum(r["duration_s"] for r in runs)
        dropped: dict[str, int] = {}
        for p in pipes:
            for reason, n in p["telemetry_dropped"].items():
                dropped[reason] = dropped.get(reason, 0) + n
        result["access_log_pipeline"] = {
            "entries_into_kafka": entries,
            "telemetry_sent": sum(p["telemetry_sent"] for p in pipes),
            "telemetry_received": received,
            "telemetry_dropped": dropped,
            "envoy_logs_dropped": sum(p["envoy_logs_dropped"] for p in pipes),
            "entries_per_s": round(entries / load_s, 1),
            "telemetry_cpu_us_per_entry": round(tele_cpu * 1e6 / entries, 1) if entries else None,
            "entries_per_s_per_core": round(entries / tele_cpu) if tele_cpu else None,
            "telemetry_cpu_us_per_received_entry": round(tele_cpu * 1e6 / received, 1) if received else None,
            "telemetry_cores": round(tele_cpu / window, 3) if window else None,
            "kafka_cpu_us_per_entry": round(sum(p["kafka_cpu_s"] for p in pipes) * 1e6 / entries, 1) if entries else None,
            "telemetry_cpu_us_per_entry_rounds": [p["telemetry_cpu_us_per_entry"] for p in pipes],
        }
    return result


def summarise(runs: list[dict[str, Any]], conversion: dict[str, Any], producer: dict[str, Any]) -> dict[str, Any]:
    by_name: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        by_name.setdefault(run["name"], []).append(run)
    results = {name: aggregate(group) for name, group in by_name.items()}
    def get(name: str, *keys: str) -> Any:
        value: Any = results.get(name)
        for key in keys:
            if not isinstance(value, dict):
                return None
            value = value.get(key)
        return value

    table = []
    for r in results.values():
        p = r.get("access_log_pipeline", {})
        table.append({
            "scenario": r["name"], "access_log": r["access_log"], "rounds": r["rounds"], "rps": r["rps"], "rps_rounds": r["rps_rounds"],
            "p99_ms_rounds": r["p99_ms_rounds"],
            "p50_ms": r["latency_ms"]["p50"], "p90_ms": r["latency_ms"]["p90"], "p99_ms": r["latency_ms"]["p99"],
            "envoy_us_per_request": r["cpu"]["envoy_us_per_request"],
            "entries_into_kafka": p.get("entries_into_kafka"), "requests": r["requests"],
            "entries_per_s": p.get("entries_per_s"),
            "telemetry_cpu_us_per_entry": p.get("telemetry_cpu_us_per_entry"),
            "entries_per_s_per_core": p.get("entries_per_s_per_core"),
            "dropped_telemetry": sum(p.get("telemetry_dropped", {}).values()) if p else None,
            "dropped_envoy": p.get("envoy_logs_dropped"),
            "stack_us_per_request": r["cpu"]["stack_us_per_request"],
            "other_processes_cores": r["cpu"]["other_processes_cores"],
        })
    latency_added: dict[str, Any] = {}
    ratios: dict[str, float | None] = {}
    for kind in ("direct", "echo"):
        on, off = f"on_{kind}", f"off_{kind}"
        if on not in results or off not in results:
            continue
        for p in ("p50", "p90", "p99"):
            a, b = get(on, "latency_ms", p), get(off, "latency_ms", p)
            latency_added[f"{kind}_{p}_added_ms"] = round(a - b, 3)
            latency_added[f"{kind}_{p}_ratio"] = ratio(a, b)
        ratios[f"{kind}_rps_on_over_off"] = ratio(get(on, "rps"), get(off, "rps"))
        ratios[f"{kind}_envoy_cpu_per_request_on_over_off"] = ratio(get(on, "cpu", "envoy_us_per_request"), get(off, "cpu", "envoy_us_per_request"))
        added = get(on, "cpu", "envoy_us_per_request") - get(off, "cpu", "envoy_us_per_request")
        ratios[f"{kind}_envoy_cpu_added_us_per_request"] = round(added, 1)
        ratios[f"{kind}_stack_cpu_per_request_on_over_off"] = ratio(get(on, "cpu", "stack_us_per_request"), get(off, "cpu", "stack_us_per_request"))
    ratios["off_echo_over_off_direct_rps"] = ratio(get("off_echo", "rps"), get("off_direct", "rps"))
    pipeline = {}
    for kind in ("direct", "echo"):
        p = get(f"on_{kind}", "access_log_pipeline")
        if p:
            own = conversion.get(f"envoy_like_{kind}", {}) if "error" not in conversion else {}
            pipeline[kind] = {
                "entries_into_kafka": p["entries_into_kafka"],
                "requests": get(f"on_{kind}", "requests"),
                "telemetry_sent": p["telemetry_sent"],
                "entries_per_s": p["entries_per_s"],
                "telemetry_cpu_us_per_entry": p["telemetry_cpu_us_per_entry"],
                "entries_per_s_per_core": p["entries_per_s_per_core"],
                "telemetry_cores": p["telemetry_cores"],
                "telemetry_received": p["telemetry_received"],
                "telemetry_cpu_us_per_received_entry": p["telemetry_cpu_us_per_received_entry"],
                "kafka_cpu_us_per_entry": p["kafka_cpu_us_per_entry"],
                "dropped": {"telemetry": p["telemetry_dropped"], "envoy_logs_dropped": p["envoy_logs_dropped"]},
                "conversion_in_process_us": own.get("access_event_cpu_us"),
                "als_parse_in_process_us": own.get("als_message_parse_cpu_us_per_entry"),
                "kafka_writer_in_process_us": producer.get("cpu_us_per_event"),
            }
            known: list[float] = [v for v in (own.get("access_event_cpu_us"), own.get("als_message_parse_cpu_us_per_entry"),
                                              producer.get("cpu_us_per_event")) if isinstance(v, (int, float))]
            if p["telemetry_cpu_us_per_entry"] is not None and len(known) == 3:
                pipeline[kind]["rest_us (grpc.aio receive, buffer, event loop)"] = round(p["telemetry_cpu_us_per_entry"] - sum(known), 1)
    # Paired within a round: on minus off, each round (the two runs were back to back).
    paired: dict[str, list[Any]] = {}
    for kind in ("direct", "echo"):
        for number in sorted({r["round"] for r in runs}):
            on_run = next((r for r in runs if r["name"] == f"on_{kind}" and r["round"] == number), None)
            off_run = next((r for r in runs if r["name"] == f"off_{kind}" and r["round"] == number), None)
            if on_run is not None and off_run is not None:
                for pct in ("p50", "p99"):
                    paired.setdefault(f"{kind}_{pct}_added_ms_per_round", []).append(
                        round(on_run["latency_ms"][pct] - off_run["latency_ms"][pct], 3))
                paired.setdefault(f"{kind}_rps_on_over_off_per_round", []).append(ratio(on_run["rps"], off_run["rps"]))
    latency_added.update(paired)
    return {"summary_method": "per scenario over rounds: the highest requests/s and the lowest of each percentile (the least "
                              "disturbed round; noise only slows a run), the median CPU per request; pipeline counts and CPU "
                              "summed over rounds. *_per_round: on minus off (or on ÷ off) within each round",
            "latency_added": latency_added, "ratios": ratios, "pipeline": pipeline, "table": table}


def parse_duration_s(text: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s)", text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r}: expected e.g. 1s or 100ms")
    return float(match[1]) / (1000 if match[2] == "ms" else 1)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_wrk_arguments(parser, duration=8, threads=2, warmup_help="seconds of unmeasured load per scenario first (0: none)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of every scenario; odd rounds off before on, even rounds on before off (default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="4 s per scenario, 1 s warm-up, 20,000 in-process conversions")
    parser.add_argument("--scenarios", default=",".join(s.name for s in SCENARIOS), help="comma-separated, in this order (default: all)")
    parser.add_argument("--envoy-buffer-size", type=int, default=16384, help="the control plane's accessLog.bufferSize (bytes, default: %(default)s)")
    parser.add_argument("--flush-interval", default="1s", help="the control plane's accessLog.flushInterval (default: %(default)s)")
    parser.add_argument("--max-events", type=int, default=10_000, help="telemetry's buffer.maxEvents (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=500, help="telemetry's buffer.batchSize (default: %(default)s)")
    parser.add_argument("--conversions", type=int, default=50_000, help="entries per case of the in-process conversion measurement (0: skip)")
    parser.add_argument("--outage", type=int, default=5, help="seconds of load per gateway with Kafka killed, at the end (0: skip)")
    parser.add_argument("--producer-events", type=int, default=50_000, help="events of the in-process Kafka writer measurement (0: skip)")
    add_workdir_arguments(parser)
    args = parser.parse_args(argv)
    chosen(parser, args.scenarios, BY_NAME)
    check_wrk_arguments(parser, args)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    try:
        args.flush_interval_s = parse_duration_s(args.flush_interval)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    if args.quick:
        args.duration, args.warmup, args.rounds = 4, 1, 1
        args.conversions, args.producer_events = min(args.conversions, 20_000), min(args.producer_events, 20_000)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    require_wrk()
    wanted = [BY_NAME[n] for n in args.scenarios.split(",") if n]
    runs: list[dict[str, Any]] = []
    with Run("accesslog", argv, args, progress) as run:
        report = run.report
        report["settings"] = {
            **wrk_settings(args),
            "rounds": args.rounds,
            "envoy_concurrency": ENVOY_CONCURRENCY,
            "access_log": {"bufferSize": args.envoy_buffer_size, "flushInterval": args.flush_interval},
            "telemetry_buffer": {"maxEvents": args.max_events, "batchSize": args.batch_size},
            "telemetry_kafka_producer": "acks=1, lz4, linger 10ms, max batch 256 KiB (telemetry/runtime.py)",
            "kafka": "one KRaft node, topic gateway-access-log with 1 partition (tests/harness/kafka.py)",
            "upstream": "examples/upstream/echo.py (Python/aiohttp), one process per gateway",
        }
        report["machine"] = describe(("grpcio", "protobuf", "aiokafka", "lz4", "prometheus-client"), ("telemetry", "gatehouse", "control_plane"),
                                     kafka=kafka_version(), java=command_output("java", "-version", stderr=True))
        bench = LogBench(args, run)
        progress("starting Kafka, telemetry, two gateways (access log off / on)")
        report["stack"] = bench.start()
        progress(f"  up in {report['stack']['start']['total_s']} s")
        if args.warmup > 0:
            progress(f"warm-up: {args.warmup:g} s per scenario")
            bench.warm_up(wanted)
        for round_no in range(1, args.rounds + 1):
            # Odd rounds run each off scenario before its on twin, even rounds after: drift cancels.
            order = wanted if round_no % 2 else [s for pair in zip(wanted[1::2], wanted[0::2]) for s in pair] + wanted[len(wanted) // 2 * 2:]
            if args.rounds > 1:
                progress(f"round {round_no} of {args.rounds}")
            for scenario in order:
                runs.append(bench.run(scenario, round_no))
        if args.producer_events > 0:
            assert bench.broker is not None
            bench.broker.create_topic("bench-producer-in-process")
            progress(f"telemetry's Kafka writer in-process, {args.producer_events} events")
            try:
                report["producer_in_process"] = producer_in_process(bench.broker.bootstrap, args.producer_events, args.batch_size)
            except Exception as exc:  # the load results stand without it
                report["producer_in_process"] = {"error": repr(exc)}
                progress(f"  FAILED: {exc!r}")
            else:
                progress(f"  KafkaAccessWriter {report['producer_in_process']['cpu_us_per_event']} us CPU/event "
                         f"(send loop {report['producer_in_process']['send_loop_cpu_us_per_event']} us), "
                         f"{report['producer_in_process']['acknowledged']} acknowledged")
        if args.outage > 0:
            progress(f"Kafka outage: {args.outage} s per gateway")
            report["kafka_outage"] = bench.outage(args.outage)  # last: the broker stays down
    if args.conversions > 0:
        progress(f"entry → event in-process, {args.conversions} entries per case")
        try:
            report["conversion_in_process"] = conversion_in_process(args.conversions)
        except Exception as exc:
            report["conversion_in_process"] = {"error": repr(exc)}
            progress(f"  FAILED: {exc!r}")
        for name, case in report["conversion_in_process"].items():
            if not isinstance(case, dict) or "access_event_cpu_us" not in case:
                continue
            progress(f"  {name:<48} access_event {case['access_event_cpu_us']} us (dict {case['access_event_dict_cpu_us']} + "
                     f"encode {case['json_encode_cpu_us']}); ALS parse {case['als_message_parse_cpu_us_per_entry']} us/entry")
    report["wall_s"] = round(time.monotonic() - run.started, 1)
    summary = summarise(runs, report.get("conversion_in_process", {}), report.get("producer_in_process", {}))
    for key, value in summary["latency_added"].items():
        if key.endswith("p99_added_ms"):
            progress(f"{key}: {value} ms (ratio {summary['latency_added'][key.replace('added_ms', 'ratio')]})")
    baseline = {row["scenario"]: {k: row[k] for k in ("rps", "p50_ms", "p99_ms", "envoy_us_per_request")}
                for row in summary["table"] if not row["access_log"]}
    run.print(baseline=baseline, **summary, scenarios=runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
