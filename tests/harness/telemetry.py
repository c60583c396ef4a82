"""The telemetry service as a real process (`python -m gatehouse telemetry`)."""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from .ports import free_port
from .processes import ManagedProcess

REPO_ROOT = Path(__file__).resolve().parents[2]


class TelemetryServiceProcess:
    """Ports are chosen at construction (the control plane's `accessLog` names this address)."""

    def __init__(self, directory: Path, *, sink: dict[str, Any], name: str = "telemetry",
                 extra: dict[str, Any] | None = None) -> None:
        self.directory = directory
        self.name = name
        self.sink = sink
        self.extra = extra or {}
        self.port = free_port()
        self.metrics_port = free_port()
        directory.mkdir(parents=True, exist_ok=True)
        self.config_path = directory / f"{name}.yaml"
        self.process: ManagedProcess | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> TelemetryServiceProcess:
        config = {
            "listen": self.address,
            "metrics": {"listen": f"127.0.0.1:{self.metrics_port}"},
            "sink": self.sink,
            "audit": {"spoolDir": str(self.directory / "spool")},
            **self.extra,
        }
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        argv = [sys.executable, "-m", "gatehouse", "telemetry", "--config", str(self.config_path), "--log-level", "debug"]
        self.process = ManagedProcess.start(argv, name=self.name, log_dir=self.directory, cwd=REPO_ROOT)
        self.process.wait_until(self.ready, timeout, "telemetry /readyz == 200")
        return self

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=1) as response:
                return int(response.status) == 200
        except OSError:
            return False

    def metric(self, name: str, **labels: str) -> float:
        """The sum of a counter's samples whose labels include ``labels`` (0 if absent)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as response:
            text: str = response.read().decode()
        total = 0.0
        for line in text.splitlines():
            if not line.startswith(name) or line.startswith("#"):
                continue
            series, _, value = line.rpartition(" ")
            if series.split("{")[0] != name:
                continue
            if all(f'{k}="{v}"' in series for k, v in labels.items()):
                total += float(value)
        return total

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
