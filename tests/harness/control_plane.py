"""The Gatehouse control plane as a real process (`python -m gatehouse control-plane`)."""

from __future__ import annotations

import json
import re
import secrets
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from .ports import free_port
from .processes import ManagedProcess

REPO_ROOT = Path(__file__).resolve().parents[2]


class ControlPlaneProcess:
    def __init__(self, config_path: Path, *, log_dir: Path, xds_port: int, admin_port: int) -> None:
        self.config_path = config_path
        self.log_dir = log_dir
        self.xds_port = xds_port
        self.admin_port = admin_port
        self.process: ManagedProcess | None = None

    @classmethod
    def write_config(
        cls,
        directory: Path,
        *,
        repo: Path,
        endpoints: Path,
        listener_port: int,
        poll_interval: str = "200ms",
        subdir: str = "routes",
        extra: dict[str, Any] | None = None,
        kubernetes: dict[str, Any] | None = None,
        git_namespaces: list[str] | None = None,
    ) -> ControlPlaneProcess:
        xds_port, admin_port = free_port(), free_port()
        directory.mkdir(parents=True, exist_ok=True)
        # POST /sync needs the operator credential: every harness control plane has one.
        operator = directory / "admin-operator-credential"
        operator.write_text(secrets.token_urlsafe(24))
        extra = dict(extra or {})
        # An ``admin`` in extra adds to this one (a read credential, openReads), address kept.
        admin = {"address": f"127.0.0.1:{admin_port}", "operatorCredentialFile": str(operator), **extra.pop("admin", {})}
        config: dict[str, Any] = {
            "xds": {"address": f"127.0.0.1:{xds_port}"},
            "admin": admin,
            "gateway": {"listenerAddress": "127.0.0.1", "listenerPort": listener_port},
            "sources": {
                "git": [
                    {
                        "name": "routes",
                        "repo": str(repo),
                        "branch": "main",
                        "path": subdir,
                        "pollInterval": poll_interval,
                        "cacheDir": str(directory / "git-cache"),
                        # The namespaces the repo's files may claim; unset: only "default".
                        **({"namespaces": git_namespaces} if git_namespaces is not None else {}),
                    }
                ],
                "staticEndpoints": {"file": str(endpoints), "pollInterval": "50ms"},
                **({"kubernetes": kubernetes} if kubernetes is not None else {}),
            },
            **extra,
        }
        path = directory / "control-plane.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return cls(path, log_dir=directory, xds_port=xds_port, admin_port=admin_port)

    def start(self, timeout: float = 60.0) -> None:
        argv = [sys.executable, "-m", "gatehouse", "control-plane", "--config", str(self.config_path), "--log-level", "debug"]
        self.process = ManagedProcess.start(argv, name="control-plane", log_dir=self.log_dir, cwd=REPO_ROOT)
        self.process.wait_until(self.ready, timeout, "control plane /readyz == 200")

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def credential(self, kind: str) -> str | None:
        """The admin credential its config names (``operator`` or ``read``), if any."""
        config = yaml.safe_load(self.config_path.read_text())
        path = (config.get("admin") or {}).get(f"{kind}CredentialFile")
        if path is None:
            return None
        file = Path(path) if Path(path).is_absolute() else self.config_path.parent / path
        return file.read_text().strip()

    def _request(self, path: str, method: str = "GET", timeout: float = 30.0) -> tuple[int, bytes]:
        """With the credential the config has for it: the operator's for a write, the
        reader's (else the operator's) for a read; probes need none."""
        credential = None
        if path not in ("/readyz", "/healthz", "/metrics"):
            credential = self.credential("operator") if method != "GET" else (self.credential("read") or self.credential("operator"))
        headers = {"Authorization": f"Bearer {credential}"} if credential else {}
        request = urllib.request.Request(self.admin_url + path, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return int(response.status), response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def ready(self) -> bool:
        try:
            return self._request("/readyz", timeout=2)[0] == 200
        except OSError:
            return False

    def status(self) -> dict[str, Any]:
        code, body = self._request("/status")
        assert code == 200, body
        data: dict[str, Any] = json.loads(body)
        return data

    def sync(self) -> dict[str, Any]:
        """POST /sync: fetch now and return what happened to each Git source."""
        code, body = self._request("/sync", method="POST")
        assert code == 200, body
        data: dict[str, Any] = json.loads(body)
        return data

    def metrics(self) -> dict[str, float]:
        """Prometheus samples as {'name{labels}': value}."""
        code, body = self._request("/metrics")
        assert code == 200
        samples: dict[str, float] = {}
        for line in body.decode().splitlines():
            if not line or line.startswith("#"):
                continue
            match = re.match(r"^(\S+)\s+(\S+)$", line)
            if match:
                samples[match.group(1)] = float(match.group(2))
        return samples

    def metric(self, name: str, **labels: str) -> float:
        """One sample; 0 if absent (a counter that never moved)."""
        if labels:
            rendered = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            name = f"{name}{{{rendered}}}"
        return self.metrics().get(name, 0.0)

    def log_tail(self, n: int = 80) -> str:
        return self.process.log_tail(n) if self.process is not None else ""
