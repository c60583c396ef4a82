"""A Git source whose URL carries credentials never shows them: not in /status, the status
page (rendered in a real Chromium), ``gatehouse status``, POST /sync's answer or the log,
including the error of a failed fetch (git echoes the URL it was given). The fetch goes to
a closed port on 127.0.0.1, so it fails for real."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.binaries import require_binary
from tests.harness.browser import chromium, screenshot_on_failure
from tests.harness.control_plane import REPO_ROOT, ControlPlaneProcess
from tests.harness.http_client import wait_for
from tests.harness.ports import free_port
from tests.harness.processes import ManagedProcess

PASSWORD = "s3cretPassw0rd%2Fx"
SECRETS = (PASSWORD, "s3cretPassw0rd/x", "tok3nValue77")


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[ControlPlaneProcess]:
    require_binary("git", "apt-get install git")
    closed = free_port()  # nothing listens: the fetch fails with git's own error
    url = f"http://gatehouse:{PASSWORD}@127.0.0.1:{closed}/routes.git?ref=main&access_token=tok3nValue77"
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text("services: {}\n")
    process = ControlPlaneProcess.write_config(tmp_path / "cp", repo=tmp_path / "unused", endpoints=endpoints, listener_port=free_port())
    config = yaml.safe_load(process.config_path.read_text())
    config["sources"]["git"][0]["repo"] = url
    process.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    argv = [sys.executable, "-m", "gatehouse", "control-plane", "--config", str(process.config_path), "--log-level", "debug"]
    # Not ready while its only Git source cannot be fetched: wait for the status instead.
    process.process = ManagedProcess.start(argv, name="control-plane", log_dir=process.log_dir, cwd=REPO_ROOT)
    try:
        process.process.wait_until(lambda: _git_error(process) is not None, 60, "the failed fetch in /status")
        yield process
    finally:
        process.stop()


def _git_error(process: ControlPlaneProcess) -> str | None:
    try:
        code, body = process._request("/status", timeout=2)
    except OSError:
        return None
    if code != 200:
        return None
    source = next(s for s in json.loads(body)["sources"] if s["kind"] == "git")
    error: str | None = source["error"]
    return error


def assert_no_secret(where: str, text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} shown in {where}: {text[:2000]}"


def test_no_credential_of_the_url_is_shown_anywhere(plane: ControlPlaneProcess, tmp_path: Path) -> None:
    status_code, status_body = plane._request("/status")
    assert status_code == 200
    status = json.loads(status_body)
    source = next(s for s in status["sources"] if s["kind"] == "git")
    assert source["repo"] == f"http://***@127.0.0.1:{source['repo'].split(':')[2].split('/')[0]}/routes.git?ref=main&access_token=***"
    assert "git fetch failed" in source["error"]
    assert_no_secret("/status", status_body.decode())

    sync_code, sync_body = plane._request("/sync", method="POST")
    assert sync_code == 200 and "git fetch failed" in json.loads(sync_body)["sources"]["routes"]["error"], sync_body
    assert_no_secret("POST /sync", sync_body.decode())

    cli = subprocess.run(
        [sys.executable, "-m", "gatehouse", "status", "--admin", plane.admin_url], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT, check=False
    )
    assert "git fetch failed" in cli.stdout, cli.stdout + cli.stderr
    assert_no_secret("gatehouse status", cli.stdout + cli.stderr)
    cli_json = subprocess.run(
        [sys.executable, "-m", "gatehouse", "status", "--json", "--admin", plane.admin_url], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT, check=False
    )
    assert '"repo": "http://***@127.0.0.1' in cli_json.stdout, cli_json.stdout + cli_json.stderr
    assert_no_secret("gatehouse status --json", cli_json.stdout + cli_json.stderr)

    with chromium(tmp_path / "chromium") as driver, screenshot_on_failure(driver, tmp_path):
        driver.get(plane.admin_url + "/")
        shown: dict[str, Any] = {}

        def rendered() -> bool:
            shown["text"] = driver.execute_script("return document.body.innerText")
            return "***@127.0.0.1" in shown["text"] and "git fetch failed" in shown["text"]

        wait_for(rendered, 20, "the status page showing the Git source and its error")
        assert_no_secret("the status page", shown["text"] + driver.page_source)

    time.sleep(0.2)  # the log lines of the last polls
    log = (plane.log_dir / "control-plane.log").read_text()
    assert "git_sync_failed" in log
    assert_no_secret("the log", log)
