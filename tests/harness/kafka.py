"""A real Apache Kafka broker for tests: one KRaft node (broker + controller) on 127.0.0.1.

The jars come from Maven Central via `scripts/fetch-kafka` (run by `scripts/setup`), cached
outside the checkout in `${GATEHOUSE_CACHE:-~/.cache/gatehouse}/kafka/<version>/libs/`; the
version is pinned only in `tests/harness/kafka-jars/pom.xml`. Java (17+) runs `kafka.Kafka` with
a small heap; the data directory is formatted once with `kafka.tools.StorageTool`.

    broker = KafkaBroker.start(tmp_path)
    try:
        broker.create_topic("events", partitions=3)
        # produce with aiokafka against broker.bootstrap ...
        assert broker.consume("events", expected=10, timeout=30) == [...]
        broker.kill()        # SIGKILL: an outage
        broker.restart()     # same ports, same data directory: topics and data survive
    finally:
        broker.stop()

Sync helpers (`create_topic`, `consume`, `produce`, ...) run aiokafka on their own event loop
(in a worker thread when called from inside a running loop, so async tests may call them,
at the price of blocking that loop); async tests can also `await` the `a*` variants.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import hashlib
import os
import subprocess
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest

from .binaries import require_binary, running_in_ci
from .kubernetes import cache_dir
from .ports import free_port
from .processes import ManagedProcess, port_open

KAFKA_HINT = "run scripts/fetch-kafka"
JAVA_HINT = "install Java 17+: apt-get install -y openjdk-17-jre-headless"
POM_FILE = Path(__file__).resolve().parent / "kafka-jars" / "pom.xml"  # a "kafka/" folder would shadow this module for mypy

# Small and quick: a test broker holds a few topics of a few messages.
DEFAULT_JVM_OPTS = (
    "-Xms64m",
    "-Xmx384m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:+ExitOnOutOfMemoryError",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
)

T = TypeVar("T")


# --- jars -----------------------------------------------------------------------------------


def kafka_version() -> str:
    """The pinned Kafka version: `<kafka.version>` in tests/harness/kafka-jars/pom.xml."""
    root = ET.parse(POM_FILE).getroot()
    for element in root.iter():
        if element.tag.rsplit("}", 1)[-1] == "kafka.version" and element.text:
            return element.text.strip()
    raise RuntimeError(f"no <kafka.version> in {POM_FILE}")


def kafka_home(version: str | None = None) -> Path:
    """`<cache>/kafka/<version>`: where scripts/fetch-kafka puts `libs/` (no pytest side effects)."""
    return cache_dir() / "kafka" / (version or kafka_version())


def kafka_libs_problem() -> str | None:
    """Why the cached jars cannot be used (missing, or fetched from another pom), or None."""
    version = kafka_version()
    home = kafka_home(version)
    jar = home / "libs" / f"kafka_2.13-{version}.jar"
    if not jar.is_file():
        return f"Kafka {version} jars not found ({jar})"
    want = hashlib.sha256(POM_FILE.read_bytes()).hexdigest()
    try:
        have = (home / ".fetched-from").read_text().strip()
    except OSError:
        have = ""
    if have != want:
        return f"Kafka {version} jars in {home} were fetched from another tests/harness/kafka-jars/pom.xml"
    return None


def kafka_libs() -> Path:
    """The directory of the pinned Kafka jars, or end the test.

    Same rule as `require_binary`: fails the test under CI=true, skips it elsewhere, with
    the hint to run scripts/fetch-kafka.
    """
    problem = kafka_libs_problem()
    if problem is not None:
        message = f"{problem}: {KAFKA_HINT}"
        if running_in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return kafka_home() / "libs"


def java_binary() -> str:
    """`java` from PATH (or JAVA_HOME/bin), or end the test (fail under CI, skip elsewhere)."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return require_binary("java", JAVA_HINT)


def random_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


# --- asyncio from sync code -----------------------------------------------------------------


def run_sync(factory: Callable[[], Awaitable[T]]) -> T:
    """Run the coroutine `factory()` to completion on a fresh event loop.

    Inside a running loop (an async test), on a worker thread: asyncio.run cannot nest.
    """

    async def main() -> T:
        return await factory()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, main()).result()


# --- the broker -----------------------------------------------------------------------------


class KafkaBroker:
    """One KRaft node (process.roles=broker,controller) as a child process.

    `.bootstrap` ("127.0.0.1:<port>"), `.port`, `.controller_port`, `.data_dir`,
    `.cluster_id`, `.pid`; `stop()` (SIGTERM, then SIGKILL), `kill()` (SIGKILL at once),
    `restart()` (same ports and data directory); `create_topic`, `delete_topic`,
    `list_topics`, `produce`, `consume`, `consume_records` (sync) and `acreate_topic`,
    `aproduce`, `aconsume_records` (async).

    Files under `log_dir`: `<name>.log` (the JVM's stdout/stderr and log4j WARN+),
    `<name>-server.log` (the broker's full log4j log), `<name>-state/` (server.properties,
    log4j2.xml, data/).
    """

    def __init__(
        self,
        *,
        log_dir: Path,
        java: str,
        libs: Path,
        name: str,
        start_timeout: float,
        properties: Mapping[str, str],
        jvm_opts: Iterable[str],
    ) -> None:
        self.log_dir = log_dir
        self.java = java
        self.libs = libs
        self.name = name
        self.start_timeout = start_timeout
        self.extra_properties = dict(properties)
        self.jvm_opts = list(jvm_opts)
        self.port = free_port()
        self.controller_port = free_port()
        while self.controller_port == self.port:
            self.controller_port = free_port()
        self.node_id = 1
        self.cluster_id = random_cluster_id()
        self.state_dir = log_dir / f"{name}-state"
        self.data_dir = self.state_dir / "data"
        self.config_file = self.state_dir / "server.properties"
        self.log4j_file = self.state_dir / "log4j2.xml"
        self.tmp_dir = self.state_dir / "tmp"  # the JVM's java.io.tmpdir (native libs unpack there)
        self.server_log = log_dir / f"{name}-server.log"
        self.process: ManagedProcess | None = None
        self.last_start_seconds: float | None = None

    @classmethod
    def start(
        cls,
        log_dir: Path,
        *,
        name: str = "kafka",
        start_timeout: float = 120.0,
        properties: Mapping[str, str] | None = None,
        jvm_opts: Iterable[str] = DEFAULT_JVM_OPTS,
        java: str | None = None,
        libs: Path | None = None,
    ) -> KafkaBroker:
        """Format a fresh data directory, start the broker, return once it serves metadata.

        `properties` override or extend the generated server.properties. A missing java or
        missing jars skip the test (fail under CI=true).
        """
        broker = cls(
            log_dir=log_dir,
            java=java or java_binary(),
            libs=libs or kafka_libs(),
            name=name,
            start_timeout=start_timeout,
            properties=properties or {},
            jvm_opts=jvm_opts,
        )
        try:
            broker._prepare()
            broker._launch()
        except BaseException:
            broker.stop()
            raise
        return broker

    # --- configuration ---

    def server_properties(self) -> dict[str, str]:
        properties = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": f"{self.node_id}@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "default.replication.factor": "1",
            "auto.create.topics.enable": "true",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # After a SIGKILL the restarted broker cannot register until the controller has
            # expired the old registration's session (default 9 s): keep that short.
            "broker.heartbeat.interval.ms": "500",
            "broker.session.timeout.ms": "3000",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "log.retention.hours": "-1",
            "log.cleaner.threads": "1",
            "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
        }
        properties.update(self.extra_properties)
        return properties

    def _log4j_config(self) -> str:
        server_log = str(self.server_log).replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
        return f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by tests/harness/kafka.py: everything to {self.server_log.name}, WARN+ to stdout. -->
<Configuration status="WARN">
  <Appenders>
    <File name="file" fileName="{server_log}" append="true">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
    <Console name="stdout" target="SYSTEM_OUT">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
      <ThresholdFilter level="WARN" onMatch="ACCEPT" onMismatch="DENY"/>
    </Console>
  </Appenders>
  <Loggers>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="org.apache.kafka.clients.NetworkClient" level="ERROR"/>
    <Root level="INFO">
      <AppenderRef ref="file"/>
      <AppenderRef ref="stdout"/>
    </Root>
  </Loggers>
</Configuration>
"""

    def _prepare(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(
            "# Written by tests/harness/kafka.py\n"
            + "".join(f"{key}={value}\n" for key, value in self.server_properties().items())
        )
        self.log4j_file.write_text(self._log4j_config())
        argv = [
            *self._java_argv("kafka.tools.StorageTool"),
            "format", f"--cluster-id={self.cluster_id}", "-c", str(self.config_file), "--ignore-formatted",
        ]  # fmt: skip
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=self._env())
        if result.returncode != 0:
            raise RuntimeError(
                f"kafka-storage format failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
            )

    def _env(self) -> dict[str, str]:
        # Nothing from the caller's JVM options: the broker gets exactly DEFAULT_JVM_OPTS.
        drop = {"JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH"}
        return {k: v for k, v in os.environ.items() if k not in drop}

    def _java_argv(self, main_class: str) -> list[str]:
        return [
            self.java,
            *self.jvm_opts,
            f"-Dlog4j2.configurationFile={self.log4j_file}",
            f"-Dkafka.logs.dir={self.log_dir}",
            f"-Djava.io.tmpdir={self.tmp_dir}",
            "-cp", f"{self.libs}/*",
            main_class,
        ]  # fmt: skip

    # --- lifecycle ---

    def _launch(self) -> None:
        if self.process is not None and self.process.alive():
            raise RuntimeError(f"{self.name} is already running (pid {self.process.pid})")
        started = time.monotonic()
        self.process = ManagedProcess.start(
            [*self._java_argv("kafka.Kafka"), str(self.config_file)],
            name=self.name,
            log_dir=self.log_dir,
            env=self._env(),
        )
        self.process.wait_until(lambda: port_open(self.port), self.start_timeout, f"listener on {self.bootstrap}")
        remaining = max(1.0, self.start_timeout - (time.monotonic() - started))
        self.process.wait_until(self.ready, remaining, f"broker metadata on {self.bootstrap}")
        self.last_start_seconds = time.monotonic() - started

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (a controlled shutdown), then SIGKILL after `timeout`."""
        if self.process is not None:
            self.process.stop(timeout)

    def kill(self) -> None:
        """SIGKILL at once: an outage. The data directory stays (recovered on restart)."""
        if self.process is not None:
            self.process.kill()

    def restart(self, *, crash: bool = False) -> None:
        """Stop (with crash=True: SIGKILL) if running, start again: same ports, cluster id, data."""
        if crash:
            self.kill()
        else:
            self.stop()
        self._launch()

    def log_tail(self, n: int = 50) -> str:
        return self.process.log_tail(n) if self.process is not None else ""

    def server_log_tail(self, n: int = 50) -> str:
        try:
            return "\n".join(self.server_log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    # --- probes and helpers (aiokafka) ---

    def ready(self) -> bool:
        """True when the broker answers a metadata request that lists itself (never raises)."""
        try:
            return run_sync(lambda: self._aready(timeout=3.0))
        except Exception:
            return False

    async def _aready(self, timeout: float) -> bool:
        from aiokafka.admin import AIOKafkaAdminClient

        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=int(timeout * 1000))
        try:
            await asyncio.wait_for(admin.start(), timeout)
            cluster = await asyncio.wait_for(admin.describe_cluster(), timeout)
        finally:
            await admin.close()
        return any(b["node_id"] == self.node_id for b in cluster.get("brokers", []))

    async def acreate_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        config: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> None:
        """Create `name` (replication factor 1) and wait until every partition has a leader."""
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=int(timeout * 1000))
        try:
            await admin.start()
            topic = NewTopic(name, partitions, 1, topic_configs=dict(config or {}))
            response = await admin.create_topics([topic], timeout_ms=int(timeout * 1000))
            for topic_name, code, *rest in response.topic_errors:
                if code != 0:
                    message = rest[0] if rest else ""
                    raise RuntimeError(f"create topic {topic_name}: error {code} {message}")
            deadline = time.monotonic() + timeout
            while True:
                described = await admin.describe_topics([name])
                parts = described[0].get("partitions", []) if described else []
                if (
                    described
                    and described[0].get("error_code", 0) == 0
                    and len(parts) == partitions
                    and all(p.get("leader", -1) >= 0 for p in parts)
                ):
                    return
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"topic {name}: no leaders after {timeout}s: {described}")
                await asyncio.sleep(0.05)
        finally:
            await admin.close()

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        config: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> None:
        run_sync(lambda: self.acreate_topic(name, partitions, config=config, timeout=timeout))

    def delete_topic(self, name: str, timeout: float = 30.0) -> None:
        async def delete() -> None:
            from aiokafka.admin import AIOKafkaAdminClient

            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
            try:
                await admin.start()
                await admin.delete_topics([name], timeout_ms=int(timeout * 1000))
            finally:
                await admin.close()

        run_sync(delete)

    def list_topics(self) -> list[str]:
        """Topic names, internal ones (like __consumer_offsets) included."""

        async def names() -> list[str]:
            from aiokafka.admin import AIOKafkaAdminClient

            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
            try:
                await admin.start()
                return sorted(await admin.list_topics())
            finally:
                await admin.close()

        return run_sync(names)

    async def aproduce(
        self,
        topic: str,
        values: Iterable[bytes],
        *,
        key: bytes | None = None,
        **producer_options: Any,
    ) -> None:
        """Send `values` in order and wait for every ack (acks=all, idempotent by default)."""
        from aiokafka import AIOKafkaProducer

        options: dict[str, Any] = {"acks": "all", "enable_idempotence": True, **producer_options}
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, **options)
        try:
            await producer.start()
            for value in values:
                await producer.send_and_wait(topic, value, key=key)
        finally:
            await producer.stop()

    def produce(
        self, topic: str, values: Iterable[bytes], *, key: bytes | None = None, **producer_options: Any
    ) -> None:
        values = list(values)
        run_sync(lambda: self.aproduce(topic, values, key=key, **producer_options))

    async def aconsume_records(self, topic: str, *, expected: int, timeout: float = 30.0) -> list[Any]:
        """Read `topic` from the beginning (all partitions, no consumer group) until at least
        `expected` records have arrived; return every aiokafka ConsumerRecord received (order
        is kept within a partition; across partitions, arrival order).

        Raises TimeoutError, naming what did arrive, when fewer come within `timeout`. Does
        not wait for more than `expected`, but returns any extra records that came in the same
        fetch, so `== [...]` on the result also catches unexpected extras most of the time.
        """
        from aiokafka import AIOKafkaConsumer

        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=self.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            metadata_max_age_ms=1000,
        )
        records: list[Any] = []
        deadline = time.monotonic() + timeout
        try:
            await consumer.start()
            while len(records) < expected:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    got = [r.value for r in records]
                    raise TimeoutError(
                        f"{topic}: {len(records)} of {expected} records after {timeout}s: {got[:20]!r}"
                    )
                batches = await consumer.getmany(timeout_ms=int(min(remaining, 0.5) * 1000))
                for batch in batches.values():
                    records.extend(batch)
        finally:
            await consumer.stop()
        return records

    def consume_records(self, topic: str, *, expected: int, timeout: float = 30.0) -> list[Any]:
        return run_sync(lambda: self.aconsume_records(topic, expected=expected, timeout=timeout))

    async def aread_all(self, topic: str, timeout: float = 20.0) -> list[bytes]:
        """Every record value of `topic` up to its end offsets as of now (all partitions)."""
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False,
                                    auto_offset_reset="earliest", request_timeout_ms=int(timeout * 1000))
        async with asyncio.timeout(timeout):
            await consumer.start()
            try:
                partitions = [TopicPartition(topic, p) for p in (consumer.partitions_for_topic(topic) or {0})]
                consumer.assign(partitions)
                await consumer.seek_to_beginning(*partitions)
                ends = await consumer.end_offsets(partitions)
                values: list[bytes] = []
                while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
                    for batch in (await consumer.getmany(timeout_ms=500)).values():
                        values.extend(r.value for r in batch)
                return values
            finally:
                await consumer.stop()

    def read_all(self, topic: str, timeout: float = 20.0) -> list[bytes]:
        return run_sync(lambda: self.aread_all(topic, timeout))

    def consume(self, topic: str, *, expected: int, timeout: float = 30.0) -> list[bytes]:
        """The values of the records of `topic` from the beginning: at least `expected` of them
        (see `aconsume_records`), TimeoutError if fewer arrive within `timeout`."""
        return [r.value for r in self.consume_records(topic, expected=expected, timeout=timeout)]

    def __repr__(self) -> str:
        return f"KafkaBroker(bootstrap={self.bootstrap!r}, pid={self.pid})"
