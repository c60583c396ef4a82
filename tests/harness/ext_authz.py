"""The ext_authz service as a real process (`python -m gatehouse ext-authz`)."""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from .ports import free_port
from .processes import ManagedProcess
from .service import REPO_ROOT, GatehouseService


class ExtAuthzProcess(GatehouseService):
    """``transport="http"`` also serves Envoy's HTTP protocol, with the route table from
    a control plane (``use_control_plane`` before ``start``; ready once it has the table)."""

    command = "ext-authz"

    def __init__(
        self,
        directory: Path,
        config: dict[str, Any],
        *,
        name: str = "ext-authz",
        transport: str = "grpc",
        rate_limit: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(directory, name=name)
        self.transport = transport
        self.http_port = free_port()
        self.admin_port = free_port()
        self.credential = secrets.token_urlsafe(24)
        (directory / f"{name}-admin-credential").write_text(self.credential)
        full = {
            "listen": f"127.0.0.1:{self.port}",
            "metrics": {"listen": f"127.0.0.1:{self.metrics_port}"},
            "workers": 1,  # one process unless a test asks for more (the default is one per CPU)
            **config,
        }
        if "revocation" in full:
            full["admin"] = {"listen": f"127.0.0.1:{self.admin_port}", "credentialFile": f"{name}-admin-credential"}
        if transport == "http":
            xds = {"address": "127.0.0.1:1", "nodeId": name, "cluster": "ext-authz"}
            full["http"] = {"listen": f"127.0.0.1:{self.http_port}", "routes": {"xds": xds}}
            if rate_limit is not None:
                full["http"]["rateLimit"] = rate_limit
        self.config = full
        self.config_path.write_text(yaml.safe_dump(full, sort_keys=False))

    @property
    def check_address(self) -> str:
        """Where Envoy sends checks: the HTTP port over HTTP, else the gRPC one."""
        return f"127.0.0.1:{self.http_port}" if self.transport == "http" else self.address

    def use_control_plane(self, xds_port: int) -> None:
        if self.transport == "http":
            self.config["http"]["routes"]["xds"]["address"] = f"127.0.0.1:{xds_port}"
            self.config_path.write_text(yaml.safe_dump(self.config, sort_keys=False))

    def start(
        self, timeout: float = 30.0, *, launcher: Sequence[str] = (), env: Mapping[str, str] | None = None
    ) -> ExtAuthzProcess:
        """``launcher`` replaces ``python -m gatehouse`` (a test's shim); ``env`` the environment."""
        argv = [*(launcher or (sys.executable, "-m", "gatehouse")), self.command, "--config", str(self.config_path), "--log-level", "debug"]
        self.process = ManagedProcess.start(argv, name=self.name, log_dir=self.directory, cwd=REPO_ROOT, env=env)
        self.process.wait_until(self.ready, timeout, "ext_authz /readyz == 200")
        return self

    def admin_env(self) -> dict[str, str]:
        return {**os.environ, "GATEHOUSE_ADMIN_CREDENTIAL": self.credential}
