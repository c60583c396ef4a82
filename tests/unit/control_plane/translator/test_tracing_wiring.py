"""Envoy's OpenTelemetry tracer, when the control plane has `tracing` (testdata/in/tracing.yaml
pins the HCM block and the collector cluster): none without it, and the config file's block."""

from __future__ import annotations

from pathlib import Path

import pytest

from control_plane.config import load_config
from control_plane.model import Origin, parse_route_file
from control_plane.translator import GatewaySettings, RouteTranslator
from control_plane.translator.from_config import gateway_settings
from control_plane.translator.latency_stamps import AuthStamp, RateLimitStamp
from control_plane.translator.settings import AccessLogSettings, ExtAuthzSettings, TracingSettings
from control_plane.translator.tracing import OTLP_CLUSTER
from servicekit.errors import ConfigError
from tests.unit.control_plane.translator.envoy_data import clusters_by_name, hcm
from tests.unit.control_plane.translator.golden import IN_DIR


def _translate(settings: GatewaySettings) -> object:
    routes, problems = parse_route_file((IN_DIR / "tracing.yaml").read_bytes(), Origin("file", "tracing.yaml"))
    assert problems == []
    return RouteTranslator(settings).translate(routes)


def test_no_tracing_without_the_setting() -> None:
    translation = _translate(GatewaySettings())
    assert "tracing" not in hcm(translation)
    assert OTLP_CLUSTER not in clusters_by_name(translation)


def test_tracing_block_and_cluster() -> None:
    translation = _translate(GatewaySettings(tracing=TracingSettings(("127.0.0.1", 4317), 0.0, "edge", 250)))
    block = hcm(translation)["tracing"]
    assert block["random_sampling"] == {}  # 0 %: the proto's default, omitted from the JSON
    provider = block["provider"]
    assert provider["name"] == "envoy.tracers.opentelemetry"
    assert provider["typed_config"]["service_name"] == "edge"
    assert provider["typed_config"]["grpc_service"] == {"envoy_grpc": {"cluster_name": OTLP_CLUSTER}, "timeout": "0.250s"}
    assert OTLP_CLUSTER in clusters_by_name(translation)


def test_latency_stamps_only_with_the_access_log_and_a_check() -> None:
    authz = ExtAuthzSettings((("127.0.0.1", 9196),), protocol="http")
    log = AccessLogSettings((("127.0.0.1", 9411),))
    assert AuthStamp().http_filter(GatewaySettings(ext_authz=authz)) is None  # nobody reads them
    assert AuthStamp().http_filter(GatewaySettings(access_log=log)) is None  # nothing to time
    assert RateLimitStamp().http_filter(GatewaySettings(ext_authz=authz, access_log=log)) is None  # no ratelimit filter
    stamp = AuthStamp().http_filter(GatewaySettings(ext_authz=authz, access_log=log))
    assert stamp is not None
    assert [v["object_key"] for v in stamp["typed_config"]["on_request_headers"]] == [
        "gatehouse.latency.auth_us", "gatehouse.latency.public_limits_us"]


def test_config_file_tracing_block(tmp_path: Path) -> None:
    path = tmp_path / "cp.yaml"
    path.write_text("tracing: {otlpAddress: 'collector:4317', samplingPercent: 12.5}\nsources: {}\n")
    config = load_config(path)
    assert gateway_settings(config, config.gateway).tracing == TracingSettings(("collector", 4317), 12.5, "gatehouse-gateway", 1000)


@pytest.mark.parametrize(
    ("block", "error"),
    [
        ("{otlpAddress: collector}", "tracing.otlpAddress"),
        ("{otlpAddress: 'c:4317', samplingPercent: 101}", "tracing.samplingPercent"),
        ("{otlpAddress: 'c:4317', serviceName: ''}", "tracing.serviceName"),
        ("{otlpAddress: 'c:4317', timeout: 5}", "tracing.timeout"),
        ("{otlpAddress: 'c:4317', sampling: 5}", "tracing.sampling"),
        ("{samplingPercent: 5}", "tracing.otlpAddress"),
    ],
)
def test_a_bad_tracing_block_names_the_field(tmp_path: Path, block: str, error: str) -> None:
    path = tmp_path / "cp.yaml"
    path.write_text(f"tracing: {block}\nsources: {{}}\n")
    with pytest.raises(ConfigError, match=error):
        load_config(path)
