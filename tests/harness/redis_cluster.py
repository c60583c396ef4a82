"""A real Redis Cluster on loopback (3 primaries, no replicas) for integration tests.

Each node is ``redis-server --cluster-enabled yes`` in its own directory, with a free
client port and a free cluster-bus port (``--cluster-port``, so the bus never has to be
port + 10000). ``redis-cli --cluster create`` assigns the 16384 slots; ``start`` returns
once every node reports ``cluster_state:ok`` and knows all the others. Nodes are stopped
by the pid the harness started, never by name.

    cluster = RedisCluster.start(log_dir=tmp_path)
    cluster.url        # "redis+cluster://127.0.0.1:<port of node 0>" (ratelimit_svc's scheme)
    cluster.stop()
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from .binaries import require_binary
from .ports import free_port
from .processes import ManagedProcess
from .redis import REDIS_HINT, ping

CLI_HINT = "install Debian's redis-tools (redis-cli): apt-get install -y redis-tools"


class ClusterNode:
    def __init__(self, *, port: int, bus_port: int, process: ManagedProcess) -> None:
        self.port = port
        self.bus_port = bus_port
        self.process = process

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


class RedisCluster:
    def __init__(self, *, nodes: list[ClusterNode], cli: str, log_dir: Path) -> None:
        self.nodes = nodes
        self.cli = cli
        self.log_dir = log_dir

    @classmethod
    def start(
        cls,
        *,
        log_dir: Path,
        size: int = 3,
        redis_bin: str | None = None,
        cli_bin: str | None = None,
        start_timeout: float = 30.0,
    ) -> RedisCluster:
        binary = redis_bin or require_binary("redis-server", REDIS_HINT)
        cli = cli_bin or require_binary("redis-cli", CLI_HINT)
        cluster = cls(nodes=[], cli=cli, log_dir=log_dir)
        try:
            for index in range(size):
                cluster.nodes.append(_start_node(binary, log_dir, index, start_timeout))
            cluster._create(start_timeout)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    @property
    def url(self) -> str:
        return f"redis+cluster://{self.nodes[0].address}"

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    def _create(self, timeout: float) -> None:
        argv = [self.cli, "--cluster", "create", *(n.address for n in self.nodes),
                "--cluster-replicas", "0", "--cluster-yes"]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{result.stdout}\n{result.stderr}")
        deadline = time.monotonic() + timeout
        while not all(self._ready(node) for node in self.nodes):
            if time.monotonic() >= deadline:
                raise TimeoutError("Redis Cluster did not reach cluster_state:ok:\n" + self.info(self.nodes[0]))
            time.sleep(0.1)

    def info(self, node: ClusterNode) -> str:
        result = subprocess.run(
            [self.cli, "-h", "127.0.0.1", "-p", str(node.port), "cluster", "info"],
            capture_output=True, text=True, timeout=5,
        )
        return result.stdout

    def _ready(self, node: ClusterNode) -> bool:
        fields = dict(
            line.split(":", 1) for line in self.info(node).replace("\r", "").splitlines() if ":" in line
        )
        return (
            fields.get("cluster_state") == "ok"
            and fields.get("cluster_slots_assigned") == "16384"
            and fields.get("cluster_known_nodes") == str(len(self.nodes))
        )

    def cli_call(self, port: int, *args: str) -> str:
        """Run one redis-cli command against one node (no redirects followed)."""
        result = subprocess.run(
            [self.cli, "-h", "127.0.0.1", "-p", str(port), *args], capture_output=True, text=True, timeout=5
        )
        return result.stdout.strip()

    def stop(self, timeout: float = 10.0) -> None:
        for node in self.nodes:
            node.process.stop(timeout)

    def __repr__(self) -> str:
        return f"RedisCluster(ports={self.ports})"


def _start_node(binary: str, log_dir: Path, index: int, timeout: float) -> ClusterNode:
    port, bus_port = free_port(), free_port()
    while bus_port == port:
        bus_port = free_port()
    data_dir = log_dir / f"redis-cluster-{index}"
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "nodes.conf").unlink(missing_ok=True)  # a node that remembers a cluster cannot join a new one
    argv = [
        binary,
        "--port", str(port),
        "--cluster-port", str(bus_port),
        "--bind", "127.0.0.1",
        "--cluster-enabled", "yes",
        "--cluster-config-file", str(data_dir / "nodes.conf"),
        "--cluster-node-timeout", "5000",
        "--appendonly", "no",
        "--save", "",
        "--dir", str(data_dir),
        "--daemonize", "no",
    ]
    process = ManagedProcess.start(argv, name=f"redis-cluster-{index}", log_dir=log_dir)
    try:
        process.wait_until(lambda: ping(port), timeout, f"PONG on :{port}")
    except TimeoutError:
        process.stop()
        raise
    return ClusterNode(port=port, bus_port=bus_port, process=process)
