"""A Gatehouse service (`python -m gatehouse <command> --config FILE`) as a real process:
its gRPC port and metrics port are chosen at construction, so other configs can name
them before it starts; ready means its /readyz answers 200."""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from .ports import free_port
from .processes import ManagedProcess

REPO_ROOT = Path(__file__).resolve().parents[2]


def sample_total(text: str, name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` whose labels include ``labels``, in a scrape."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


class GatehouseService:
    command = ""

    def __init__(self, directory: Path, *, name: str, extra: dict[str, Any] | None = None) -> None:
        self.directory = directory
        self.name = name
        self.extra = extra or {}
        self.port = free_port()
        self.metrics_port = free_port()
        directory.mkdir(parents=True, exist_ok=True)
        self.config_path = directory / f"{name}.yaml"
        self.process: ManagedProcess | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _launch(self, config: dict[str, Any], timeout: float) -> None:
        """Write ``config`` (with listen, metrics and ``extra``) and start; wait for /readyz."""
        full = {"listen": self.address, "metrics": {"listen": f"127.0.0.1:{self.metrics_port}"}, **config, **self.extra}
        self.config_path.write_text(yaml.safe_dump(full, sort_keys=False))
        argv = [sys.executable, "-m", "gatehouse", self.command, "--config", str(self.config_path), "--log-level", "debug"]
        self.process = ManagedProcess.start(argv, name=self.name, log_dir=self.directory, cwd=REPO_ROOT)
        self.process.wait_until(self.ready, timeout, f"{self.command} /readyz == 200")

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

    def metric(self, name: str, **labels: str) -> float:
        """The sum of a metric's samples whose labels include ``labels`` (0 if absent)."""
        return sample_total(self.metrics_text(), name, **labels)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
