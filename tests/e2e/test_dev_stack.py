"""`gatehouse dev` brings the whole stack up, and the curl lines it prints work.

`gatehouse dev --check` is the newcomer's path, run here as the real command: one verdict
line per step, exit 0 when all pass, and a stop with exit 1 at the first failing step.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness.binaries import require_binary
from tests.harness.envoy import envoy_binary
from tests.harness.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
VERDICT = re.compile(r"^(ok   .+ \(\d+\.\d s\)|FAIL .+: .+)$")


def _dev_check(port: int, workdir: Path, env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gatehouse", "dev", "--check", "--port", str(port), "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=timeout,
        env=env,
    )


def _verdicts(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith(("ok ", "FAIL "))]


def test_dev_stack_serves_the_examples_and_a_live_change(tmp_path: Path) -> None:
    envoy_binary()
    require_binary("redis-server", "apt-get install redis-server (scripts/setup does this)")
    port = free_port()
    result = _dev_check(port, tmp_path / "dev")
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert "dev check: ok" in result.stdout
    assert f'curl -si -H "Authorization: Bearer $WRITE" http://127.0.0.1:{port}/api/v2/orders/bulk' in result.stdout
    assert "export READ=$(gatehouse token" in result.stdout
    assert f"http://127.0.0.1:{port}/api/v2/quotes; done; echo    # 200 200 200 200 200 429" in result.stdout
    # The features' lines (each checked below by a step of its own).
    workdir = tmp_path / "dev"
    for line in (
        f"curl -s -o /dev/null -w '%{{http_code}} ' http://127.0.0.1:{port}/api/v2/launch; curl -si http://127.0.0.1:{port}/api/v2/launch",
        f"export KEY=$(gatehouse apikey create --consumer partner-a --config {workdir / 'ext-authz.yaml'})",
        f'curl -si -H "x-api-key: $KEY" http://127.0.0.1:{port}/api/v2/partners/orders',
        f'curl -s -H "Authorization: Bearer $READ" http://127.0.0.1:{port}/api/v2/billing/invoices',
        "gatehouse breaker open shop/inventory --admin http://127.0.0.1:",
        f"--credential-file {workdir / 'breaker-operator-credential'}",
    ):
        assert line in result.stdout, line

    # One verdict line per step, every one of them ok, in the order the stack starts.
    verdicts = _verdicts(result.stdout)
    assert all(VERDICT.match(line) and line.startswith("ok   ") for line in verdicts), "\n".join(verdicts)
    expected_in_order = [
        "ok   tools found (git, redis-server, envoy)",
        "ok   routes repository ",
        f"ok   config written to {tmp_path / 'dev'}, gateway port {port} free",
        "ok   redis up on 127.0.0.1:",
        "ok   upstream order-service up on 127.0.0.1:",
        "ok   upstream order-service-v3 up on 127.0.0.1:",
        "ok   telemetry ready on 127.0.0.1:",
        "ok   control plane ready on 127.0.0.1:",
        "ok   ext_authz ready on 127.0.0.1:",
        "ok   ratelimit ready on 127.0.0.1:",
        f"ok   envoy serving http://127.0.0.1:{port}/api/v2/checkout",
        "ok   tokens minted",
        "ok   GET /api/v2/orders/42 -> 401: an authenticated route without a token",
        "ok   GET /api/v2/orders/42 -> 200 from order-service:",
        "ok   GET /api/v2/orders/bulk -> 403:",
        "ok   GET /api/v2/orders/bulk -> 200 from order-service-v3:",
        "ok   GET /api/v2/orders/42/items/7 -> 200 from order-service:",
        "ok   GET /reports/2026-11.csv -> 200 from order-service-v3:",
        "ok   GET /api/v1/anything -> 410:",
        "ok   GET /nowhere -> 404:",
        "ok   rate limit /api/v2/quotes: 5 x 200 then 429 with Retry-After",
        "ok   token and route limit decided in one call (X-RateLimit-Limit: 100)",
        "ok   access log ",
        "ok   waiting room /api/v2/launch: 200, then 503 with a ticket, admitted with it after Retry-After",
        "ok   API key: gatehouse apikey create, /api/v2/partners/orders -> 200 as partner-a, 401 without",
        "ok   token swap /api/v2/billing/invoices: the upstream got ext_authz's token for legacy-billing, not the client's",
        "ok   breaker move: gatehouse breaker open shop/inventory -> the fallback, close -> order-service",
        "ok   live route change: commit moves /api/v2/checkout to order-service-v3",
    ]
    assert len(verdicts) == len(expected_in_order), "\n".join(verdicts)
    for line, prefix in zip(verdicts, expected_in_order, strict=True):
        assert line.startswith(prefix), f"{line!r} should start with {prefix!r}"
    assert f"dev check: ok ({len(expected_in_order)} steps)" in result.stdout

    # The banner names the control plane's status page: the admin port's root.
    status = re.search(r"control plane http://127\.0\.0\.1:(\d+)/status ", result.stdout)
    page = re.search(r"status page +http://127\.0\.0\.1:(\d+)/ ", result.stdout)
    assert status and page, result.stdout
    assert status.group(1) == page.group(1)


def test_dev_check_stops_at_the_first_failing_step(tmp_path: Path) -> None:
    """The gateway port is taken: the steps before it pass, it fails, nothing after it starts."""
    envoy_binary()
    require_binary("redis-server", "apt-get install redis-server (scripts/setup does this)")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = _dev_check(port, tmp_path / "dev", timeout=60)
    assert result.returncode == 1, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    verdicts = _verdicts(result.stdout)
    assert [line.split(" (")[0] for line in verdicts[:2]] == ["ok   tools found", f"ok   routes repository {tmp_path / 'dev' / 'routes-repo'}"]
    assert verdicts[2] == f"FAIL config written to {tmp_path / 'dev'}, gateway port {port} free: port {port} is in use; pass --port"
    assert len(verdicts) == 3, "\n".join(verdicts)
    assert f"dev check: FAIL at step 3: config written to {tmp_path / 'dev'}, gateway port {port} free" in result.stdout
    assert "Gatehouse dev stack is up." not in result.stdout
    assert not (tmp_path / "dev" / "logs" / "redis.log").exists()


def test_dev_check_names_a_missing_redis_server(tmp_path: Path) -> None:
    """A newcomer without Debian's redis-server: the first step fails and says how to install it."""
    git = require_binary("git", "apt-get install git")
    envoy_binary()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(git)
    env = {**os.environ, "PATH": str(bin_dir)}
    result = _dev_check(free_port(), tmp_path / "dev", env=env, timeout=60)
    assert result.returncode == 1, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert _verdicts(result.stdout) == [
        "FAIL tools found (git, redis-server, envoy): redis-server not found; install it with: apt-get install -y redis-server (make dev does this)"
    ]
    assert "dev check: FAIL at step 1: tools found (git, redis-server, envoy)" in result.stdout


def _children(pid: int) -> list[int]:
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as children:
            found += [int(child) for child in children.read().split()]
    return found


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize(
    ("sig", "when"),
    [("SIGINT", "up"), ("SIGTERM", "up"), ("SIGINT", "starting"), ("SIGTERM", "starting")],
)
def test_dev_started_from_a_script_stops_everything_on_sigint_or_sigterm(tmp_path: Path, sig: str, when: str) -> None:
    """Issue 25: started in the background of a non-interactive shell (a script, CI), the job
    has SIGINT ignored; dev ignored it, and SIGTERM during the start waited for the whole
    start. Either signal, at any point, must stop dev and every process it started within
    a few seconds."""
    envoy_binary()
    require_binary("redis-server", "apt-get install redis-server (scripts/setup does this)")
    # The case to handle: such a shell starts its background jobs with SIGINT ignored.
    probe = subprocess.run(["sh", "-c", "grep SigIgn: /proc/self/status & wait"], capture_output=True, text=True, check=True)
    assert int(probe.stdout.split()[1], 16) & (1 << (signal.SIGINT - 1)), probe.stdout
    workdir, out, pidfile = tmp_path / "dev", tmp_path / "dev.out", tmp_path / "dev.pid"
    command = f"'{sys.executable}' -m gatehouse dev --port {free_port()} --workdir '{workdir}'"
    shell = subprocess.Popen(
        ["sh", "-c", f"{command} > '{out}' 2>&1 & echo $! > '{pidfile}'; wait"],
        cwd=REPO_ROOT, stdin=subprocess.DEVNULL, start_new_session=True,
    )
    pid = None
    children: list[int] = []
    try:
        marker = "Gatehouse dev stack is up." if when == "up" else "ok   redis up on"
        deadline = time.monotonic() + 180
        while not (out.exists() and marker in out.read_text()):
            assert time.monotonic() < deadline and shell.poll() is None, out.read_text() if out.exists() else "no output"
            time.sleep(0.1)
        pid = int(pidfile.read_text())
        children = _children(pid)
        assert len(children) >= (8 if when == "up" else 1), children  # redis, 2 upstreams, 4 services, envoy
        for child in children:  # each can take dev's SIGTERM (none inherited a blocked mask)
            with open(f"/proc/{child}/status") as status:
                blocked = int(next(line for line in status if line.startswith("SigBlk:")).split()[1], 16)
            assert not blocked & (1 << (signal.SIGTERM - 1)), f"process {child} has SIGTERM blocked"
        sent = time.monotonic()
        os.kill(pid, getattr(signal, sig))
        shell.wait(timeout=30)
        took = time.monotonic() - sent
        assert not _running(pid)
        assert took <= 8, f"dev took {took:.1f} s to stop after {sig}"
        left = [child for child in children if _running(child)]
        assert not left, f"still running after dev stopped: {left}"
        assert f"dev: {sig}, stopping everything" in out.read_text()
    finally:
        for leftover in ([pid] if pid is not None and _running(pid) else []) + [c for c in children if _running(c)]:
            os.killpg(leftover, signal.SIGKILL) if leftover != pid else os.kill(leftover, signal.SIGKILL)
        shell.kill()
        shell.wait()
