"""Envoy's gRPC access logger on the listener, when the control plane has `accessLog`
(testdata/in/access_log.yaml pins the logger and its cluster): none without the setting,
and the config file's `accessLog` block."""

from __future__ import annotations

from pathlib import Path

import pytest

from control_plane.config import load_config
from servicekit.errors import ConfigError
from control_plane.model import Origin, parse_route_file
from control_plane.translator.from_config import gateway_settings
from control_plane.translator import GatewaySettings, RouteTranslator
from control_plane.translator.access_log import ACCESS_LOG_CLUSTER, AccessLogSettings
from tests.unit.control_plane.translator.envoy_data import clusters_by_name, hcm
from tests.unit.control_plane.translator.golden import IN_DIR


def test_no_access_log_without_the_setting() -> None:
    routes, problems = parse_route_file((IN_DIR / "access_log.yaml").read_bytes(), Origin("file", "access_log.yaml"))
    assert problems == []
    translation = RouteTranslator(GatewaySettings()).translate(routes)
    assert "access_log" not in hcm(translation)
    assert ACCESS_LOG_CLUSTER not in clusters_by_name(translation)


def test_config_file_access_log_block(tmp_path: Path) -> None:
    path = tmp_path / "cp.yaml"
    path.write_text("accessLog: {address: 127.0.0.1:9411, bufferSize: 0, flushInterval: 100ms}\nsources: {}\n")
    config = load_config(path)
    settings = gateway_settings(config, config.gateway).access_log
    assert settings == AccessLogSettings((("127.0.0.1", 9411),), 0, 100)


@pytest.mark.parametrize(
    ("block", "error"),
    [
        ("{address: nowhere}", "accessLog.address"),
        ("{address: 127.0.0.1:9411, bufferSize: -1}", "accessLog.bufferSize"),
        ("{address: 127.0.0.1:9411, flushInterval: 5}", "accessLog.flushInterval"),
    ],
)
def test_a_bad_access_log_block_names_the_field(tmp_path: Path, block: str, error: str) -> None:
    path = tmp_path / "cp.yaml"
    path.write_text(f"accessLog: {block}\nsources: {{}}\n")
    with pytest.raises(ConfigError, match=error):
        load_config(path)
