"""A real redis-server on a free loopback port, with no persistence, for integration tests."""

from __future__ import annotations

import socket
from pathlib import Path

from .binaries import require_binary
from .ports import free_port
from .processes import ManagedProcess

REDIS_HINT = "install Debian's redis-server: apt-get install -y redis-server"

_PING = b"*1\r\n$4\r\nPING\r\n"


def ping(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    """Send a raw RESP PING and expect +PONG: no client library needed to know Redis is up.

    "Accepting TCP" is not enough: Redis accepts before it has loaded its
    data set and answers -LOADING meanwhile.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(_PING)
            reply = b""
            while not reply.endswith(b"\r\n"):
                chunk = sock.recv(64)
                if not chunk:
                    break
                reply += chunk
    except OSError:
        return False
    return reply == b"+PONG\r\n"


class RedisServer:
    """One redis-server process: `.port`, `.url`, and stop/kill/restart on the same port."""

    def __init__(
        self, *, binary: str, port: int, log_dir: Path, name: str, start_timeout: float
    ) -> None:
        self.binary = binary
        self.port = port
        self.log_dir = log_dir
        self.name = name
        self.data_dir = log_dir / f"{name}-data"
        self.start_timeout = start_timeout
        self.process: ManagedProcess | None = None

    @classmethod
    def start(
        cls,
        *,
        log_dir: Path,
        port: int | None = None,
        name: str = "redis",
        redis_bin: str | None = None,
        start_timeout: float = 10.0,
    ) -> RedisServer:
        """Start redis-server and return once it answers PING."""
        server = cls(
            binary=redis_bin or require_binary("redis-server", REDIS_HINT),
            port=port if port is not None else free_port(),
            log_dir=log_dir,
            name=name,
            start_timeout=start_timeout,
        )
        server._launch()
        return server

    def _launch(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.data_dir),
            "--daemonize", "no",
        ]
        self.process = ManagedProcess.start(argv, name=self.name, log_dir=self.log_dir)
        try:
            self.process.wait_until(self.ping, self.start_timeout, f"PONG on :{self.port}")
        except TimeoutError:
            self.process.stop()
            raise

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def ping(self) -> bool:
        return ping(self.port)

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `timeout`."""
        if self.process is not None:
            self.process.stop(timeout)

    def kill(self) -> None:
        """SIGKILL at once: what an outage looks like to the services under test."""
        if self.process is not None:
            self.process.kill()

    def restart(self) -> None:
        """Stop (if running) and start again on the same port; the data set is empty again."""
        self.stop()
        self._launch()

    def log_tail(self, n: int = 50) -> str:
        return self.process.log_tail(n) if self.process is not None else ""

    def __repr__(self) -> str:
        return f"RedisServer(port={self.port}, pid={self.pid})"
