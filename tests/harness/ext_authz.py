"""The ext_authz service as a real process (`python -m gatehouse ext-authz`)."""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
import sys
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from .ports import free_port
from .processes import ManagedProcess
from .service import sample_total

REPO_ROOT = Path(__file__).resolve().parents[2]


class ExtAuthzProcess:
    def __init__(self, directory: Path, config: dict[str, Any], *, name: str = "ext-authz") -> None:
        self.directory = directory
        self.name = name
        self.port = free_port()
        self.admin_port = free_port()
        self.metrics_port = free_port()
        self.credential = secrets.token_urlsafe(24)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{name}-admin-credential").write_text(self.credential)
        full = {
            "listen": f"127.0.0.1:{self.port}",
            "metrics": {"listen": f"127.0.0.1:{self.metrics_port}"},
            "workers": 1,  # one process unless a test asks for more (the default is one per CPU)
            **config,
        }
        if "revocation" in full:
            full["admin"] = {"listen": f"127.0.0.1:{self.admin_port}", "credentialFile": f"{name}-admin-credential"}
        self.config_path = directory / f"{name}.yaml"
        self.config_path.write_text(yaml.safe_dump(full, sort_keys=False))
        self.process: ManagedProcess | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(
        self, timeout: float = 30.0, *, launcher: Sequence[str] = (), env: Mapping[str, str] | None = None
    ) -> ExtAuthzProcess:
        """``launcher`` replaces ``python -m gatehouse`` (a test's shim); ``env`` the environment."""
        argv = [*(launcher or (sys.executable, "-m", "gatehouse")), "ext-authz", "--config", str(self.config_path), "--log-level", "debug"]
        self.process = ManagedProcess.start(argv, name=self.name, log_dir=self.directory, cwd=REPO_ROOT, env=env)
        self.process.wait_until(self.ready, timeout, "ext_authz /readyz == 200")
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

    def metric(self, name: str, **labels: str) -> float:
        return sample_total(self.metrics_text(), name, **labels)

    def admin_env(self) -> dict[str, str]:
        import os

        return {**os.environ, "GATEHOUSE_ADMIN_CREDENTIAL": self.credential}

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
