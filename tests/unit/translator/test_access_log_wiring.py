"""Envoy's gRPC access logger on the listener, when the control plane has `accessLog`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from control_plane.config import load_config
from servicekit.errors import ConfigError
from control_plane.model import Origin, parse_route_file
from control_plane.render import resource_data
from control_plane.translator.from_config import gateway_settings
from control_plane.translator import GatewaySettings, RouteTranslator
from control_plane.translator.access_log import ACCESS_LOG_CLUSTER, AccessLogSettings

ROUTES = """\
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: orders, namespace: shop}
spec:
  match: {pathPrefix: /orders}
  backends: [{service: orders, port: 80}]
"""


def translate(settings: GatewaySettings) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    routes, problems = parse_route_file(ROUTES, Origin("git", "r.yaml", "abc"))
    assert problems == []
    translation = RouteTranslator(settings).translate(routes)
    [listener] = [resource_data(r) for r in translation.listeners]
    hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
    return hcm, [resource_data(c) for c in translation.clusters]


def test_the_listener_streams_access_logs_to_the_telemetry_cluster() -> None:
    hcm, clusters = translate(GatewaySettings(access_log=AccessLogSettings((("127.0.0.1", 9411),), 32768, 250)))
    [logger] = hcm["access_log"]
    config = logger["typed_config"]
    common = config["common_config"]
    assert common["grpc_service"]["envoy_grpc"]["cluster_name"] == ACCESS_LOG_CLUSTER
    assert common["buffer_size_bytes"] == 32768 and common["buffer_flush_interval"] == "0.250s"
    assert common["transport_api_version"] == "V3"
    assert config["additional_request_headers_to_log"] == ["x-user-id", "traceparent", "x-b3-traceid"]
    assert config["additional_response_headers_to_log"] == ["x-ratelimit-remaining"]
    [cluster] = [c for c in clusters if c["name"] == ACCESS_LOG_CLUSTER]
    address = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
    assert address == {"address": "127.0.0.1", "port_value": 9411}


def test_no_access_log_without_the_setting() -> None:
    hcm, clusters = translate(GatewaySettings())
    assert "access_log" not in hcm
    assert ACCESS_LOG_CLUSTER not in {c["name"] for c in clusters}


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
