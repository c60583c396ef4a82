"""ratelimit_svc as a real process (`python -m gatehouse ratelimit`)."""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from .ports import free_port
from .processes import ManagedProcess

REPO_ROOT = Path(__file__).resolve().parents[2]


class RateLimitServiceProcess:
    """Ports are chosen at construction (the control plane's config names this address);
    the config is written at start, once the control plane's xDS port is known."""

    def __init__(self, directory: Path, *, redis_url: str, name: str = "ratelimit", extra: dict[str, Any] | None = None) -> None:
        self.directory = directory
        self.name = name
        self.redis_url = redis_url
        self.extra = extra or {}
        self.port = free_port()
        self.metrics_port = free_port()
        directory.mkdir(parents=True, exist_ok=True)
        self.config_path = directory / f"{name}.yaml"
        self.process: ManagedProcess | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, xds_port: int, timeout: float = 30.0) -> RateLimitServiceProcess:
        config = {
            "listen": f"127.0.0.1:{self.port}",
            "metrics": {"listen": f"127.0.0.1:{self.metrics_port}"},
            "redis": {"url": self.redis_url, "timeout": "50ms"},
            "policies": {"xds": {"address": f"127.0.0.1:{xds_port}", "nodeId": self.name}},
            **self.extra,
        }
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        argv = [sys.executable, "-m", "gatehouse", "ratelimit", "--config", str(self.config_path), "--log-level", "debug"]
        self.process = ManagedProcess.start(argv, name=self.name, log_dir=self.directory, cwd=REPO_ROOT)
        self.process.wait_until(self.ready, timeout, "ratelimit /readyz == 200")
        return self

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=1) as response:
                return int(response.status) == 200
        except OSError:
            return False

    def metrics_text(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as response:
            text: str = response.read().decode()
            return text

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
