"""The overload manager in the rendered Envoy bootstrap, and `gatehouse bootstrap`'s flags for it."""

from __future__ import annotations

import io
import unittest.mock
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml

from gatehouse.cli import main
from gatehouse.envoy_bootstrap import DOWNSTREAM_CONNECTIONS, FIXED_HEAP, OverloadSettings, render_bootstrap
from tests.harness.envoy import envoy_binary, validate_config


def render(overload: OverloadSettings | None) -> dict[str, Any]:
    return render_bootstrap(xds_host="127.0.0.1", xds_port=18000, admin_port=9901, overload=overload)


def cli(*args: str) -> dict[str, Any]:
    out = io.StringIO()
    # main() configures structlog for the process with cached loggers: after it, other
    # tests' capture_logs would see nothing. The command itself logs nothing here.
    with redirect_stdout(out), unittest.mock.patch("gatehouse.cli.configure_logging"):
        assert main(["bootstrap", *args]) == 0
    data: dict[str, Any] = yaml.safe_load(out.getvalue())
    return data


def test_no_overload_manager_unless_asked() -> None:
    assert "overload_manager" not in render(None)


def test_monitors_and_actions() -> None:
    manager = render(OverloadSettings(max_connections=123, max_heap_bytes=456))["overload_manager"]
    monitors = {m["name"]: m["typed_config"] for m in manager["resource_monitors"]}
    assert monitors[FIXED_HEAP]["max_heap_size_bytes"] == 456
    assert monitors[DOWNSTREAM_CONNECTIONS]["max_active_downstream_connections"] == 123
    actions = {a["name"]: a["triggers"] for a in manager["actions"]}
    assert actions == {
        "envoy.overload_actions.shrink_heap": [{"name": FIXED_HEAP, "threshold": {"value": 0.95}}],
        "envoy.overload_actions.stop_accepting_connections": [{"name": FIXED_HEAP, "threshold": {"value": 0.95}}],
        "envoy.overload_actions.stop_accepting_requests": [{"name": FIXED_HEAP, "threshold": {"value": 0.98}}],
    }


def test_cli_defaults_and_flags() -> None:
    default = cli()["overload_manager"]
    assert default == render(OverloadSettings())["overload_manager"]
    custom = cli("--max-connections", "10", "--max-heap-bytes", "2048")["overload_manager"]
    assert custom == render(OverloadSettings(max_connections=10, max_heap_bytes=2048))["overload_manager"]
    assert "overload_manager" not in cli("--no-overload-manager")


@pytest.mark.envoy
def test_envoy_accepts_the_overload_manager(tmp_path: Path) -> None:
    path = tmp_path / "bootstrap.yaml"
    path.write_text(yaml.safe_dump(cli("--max-connections", "1000"), sort_keys=False))
    result = validate_config(envoy_binary(), path)
    assert result.returncode == 0, result.stdout + result.stderr
