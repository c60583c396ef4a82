"""`gatehouse dev` brings the whole stack up, and the curl lines it prints work."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.harness.binaries import require_binary
from tests.harness.envoy import envoy_binary
from tests.harness.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_dev_stack_serves_the_examples_and_a_live_change(tmp_path: Path) -> None:
    envoy_binary()
    require_binary("redis-server", "apt-get install redis-server (scripts/setup does this)")
    port = free_port()
    result = subprocess.run(
        [sys.executable, "-m", "gatehouse", "dev", "--check", "--port", str(port), "--workdir", str(tmp_path / "dev")],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=180,
    )
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert "dev check: ok" in result.stdout
    assert f'curl -si -H "Authorization: Bearer $WRITE" http://127.0.0.1:{port}/api/v2/orders/bulk' in result.stdout
    assert "export READ=$(gatehouse token" in result.stdout
    assert f"http://127.0.0.1:{port}/api/v2/quotes; done; echo    # 200 200 200 200 200 429" in result.stdout
