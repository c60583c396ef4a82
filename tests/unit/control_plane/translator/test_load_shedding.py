"""Shedding by route priority: HIGH-priority upstream pools for critical/high routes, and the
latency-driven concurrency limit that only `low` routes pass through (testdata/in/
load_shedding.yaml pins the limit's filter and which routes switch it off)."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format
from pydantic import ValidationError

from control_plane.config import ControlPlaneConfig, Gateway
from control_plane.model import Route
from control_plane.model.circuit_breaker import CircuitBreaker
from control_plane.translator.from_config import gateway_settings
from control_plane.translator import ClusterRef, GatewaySettings
from control_plane.translator.clusters import ClusterPolicy, cluster
from control_plane.translator.listeners import http_filters
from control_plane.translator.load_shedding import SHED_FILTER, SheddingSettings
from control_plane.translator.route_entries import route_entries
from tests.unit.control_plane.translator.test_route_shields import route

SHEDDING = GatewaySettings(shedding=SheddingSettings(latency_target_ms=200, max_concurrency=500))


def entries(r: Route, settings: GatewaySettings = GatewaySettings()) -> list[dict[str, Any]]:
    return [json_format.MessageToDict(e, preserving_proto_field_name=True) for e in route_entries(r, settings)]


@pytest.mark.parametrize("priority, expected", [("critical", "HIGH"), ("high", "HIGH"), ("normal", None), ("low", None)])
def test_critical_and_high_routes_use_the_high_priority_pool(priority: str, expected: str | None) -> None:
    [entry] = entries(route(priority=priority))
    assert entry["route"].get("priority") == expected


def test_every_cluster_has_the_same_bulkhead_for_both_priorities() -> None:
    policy = ClusterPolicy(circuit_breaker=CircuitBreaker.model_validate({"maxRequests": 7, "maxConnections": 3}))
    data = json_format.MessageToDict(cluster(ClusterRef("shop", "svc", 8080), policy), preserving_proto_field_name=True)
    by_priority = {t.get("priority", "DEFAULT"): t for t in data["circuit_breakers"]["thresholds"]}
    assert set(by_priority) == {"DEFAULT", "HIGH"}
    for thresholds in by_priority.values():
        assert thresholds["max_requests"] == 7 and thresholds["max_connections"] == 3
        assert "retry_budget" in thresholds, "retries stay budgeted at HIGH priority too"


def test_without_load_shedding_no_route_passes_a_concurrency_limit() -> None:
    assert SHED_FILTER not in [f["name"] for f in http_filters(GatewaySettings())]
    [entry] = entries(route(priority="low"))
    assert SHED_FILTER not in entry.get("typed_per_filter_config", {})


def test_the_gateway_setting_drives_the_limit() -> None:
    config = ControlPlaneConfig.model_validate(
        {"gateway": {"loadShedding": {"latencyTarget": "150ms", "maxConcurrency": 64}}, "sources": {}}
    )
    settings = gateway_settings(config, config.gateway)
    assert settings.shedding == SheddingSettings(latency_target_ms=150, max_concurrency=64)


@pytest.mark.parametrize(
    "bad, field",
    [
        ({"latencyTarget": "0ms"}, "latencyTarget"),
        ({"latencyTarget": "100ms", "maxConcurrency": 0}, "maxConcurrency"),
        ({"maxConcurrency": 10}, "latencyTarget"),
    ],
)
def test_bad_load_shedding_settings_name_the_field(bad: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Gateway.model_validate({"loadShedding": bad})
    assert field in str(caught.value)
