"""Circuit breakers, retry budgets, outlier detection, health checks and the timeout hierarchy."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from control_plane.model import Origin, Route, parse_route_file
from control_plane.render import resource_data
from control_plane.translator import GatewaySettings, RouteTranslator
from control_plane.translator.pipeline import refusals, unenforced
from tests.unit.control_plane.translator.golden import translate_case


def doc(name: str, spec: dict[str, Any], namespace: str = "shop") -> dict[str, Any]:
    return {"apiVersion": "gatehouse.io/v1alpha1", "kind": "Route", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def spec(path: str, service: str = "inventory", **extra: Any) -> dict[str, Any]:
    return {"match": {"pathPrefix": path}, "backends": [{"service": service, "port": 8080}], "auth": {"required": False}, **extra}


def parse(documents: list[dict[str, Any]], filename: str = "r.yaml") -> list[Route]:
    routes, problems = parse_route_file(yaml.safe_dump_all(documents, sort_keys=False), Origin("file", filename))
    assert problems == [], [str(p) for p in problems]
    return routes


def problems_of(timeouts: dict[str, str], **extra: Any) -> list[str]:
    text = yaml.safe_dump(doc("t", spec("/t", timeouts=timeouts, **extra)), sort_keys=False)
    _, problems = parse_route_file(text, Origin("file", "t.yaml"))
    return [str(p).split(": ", 1)[1] for p in problems]


def clusters(translation: Any) -> dict[str, dict[str, Any]]:
    return {data["name"]: data for data in (resource_data(r) for r in translation.clusters)}


def test_circuit_breaker_becomes_the_thresholds_of_both_priorities() -> None:
    [data, _] = translate_case("resilience").data("clusters")
    limits = {"max_connections": 2, "max_pending_requests": 1, "max_requests": 4, "max_retries": 1}
    assert data["circuit_breakers"] == {"thresholds": [limits, {"priority": "HIGH", **limits}]}
    assert data["connect_timeout"] == "0.250s"
    assert data["outlier_detection"] == {
        "consecutive_5xx": 3, "interval": "1s", "base_ejection_time": "2s", "max_ejection_percent": 50,
    }
    assert data["health_checks"] == [
        {"timeout": "0.500s", "interval": "2s", "unhealthy_threshold": 2, "healthy_threshold": 1,
         "no_traffic_interval": "2s", "http_health_check": {"path": "/health"}}
    ]


def test_every_cluster_gets_a_retry_budget_unless_max_retries_is_fixed() -> None:
    [plain] = translate_case("hosts").data("clusters")[:1]
    budget = {"retry_budget": {"budget_percent": {"value": 20.0}, "min_retry_concurrency": 3}}
    assert plain["circuit_breakers"] == {"thresholds": [budget, {"priority": "HIGH", **budget}]}
    assert plain["connect_timeout"] == "3s"
    assert "outlier_detection" not in plain and "health_checks" not in plain
    routes = parse([doc("a", spec("/a", circuitBreaker={"maxConnections": 5}))])
    [data] = clusters(RouteTranslator(GatewaySettings()).translate(routes)).values()
    limited = {"max_connections": 5, "retry_budget": {"budget_percent": {"value": 20.0}, "min_retry_concurrency": 3}}
    assert data["circuit_breakers"]["thresholds"] == [limited, {"priority": "HIGH", **limited}]


def test_a_route_that_sets_nothing_shares_the_cluster_another_route_configured() -> None:
    result = translate_case("resilience")
    data = result.data("clusters")[0]
    assert data["name"] == "shop/inventory:8080"
    assert result.translation.clusters[0].provenance == ("shop/inventory", "shop/inventory-reads")


@pytest.mark.parametrize(
    "field, first, second, shown",
    [
        ("circuitBreaker", {"maxConnections": 2}, {"maxConnections": 3}, "{'maxConnections': 3}"),
        ("outlierDetection", {"consecutive5xx": 3}, {"consecutive5xx": 5}, "{'consecutive5xx': 5}"),
        ("healthCheck", {"path": "/health"}, {"path": "/ready"}, "/ready"),
    ],
)
def test_contradicting_cluster_settings_quarantine_the_later_route_naming_both(
    field: str, first: dict[str, Any], second: dict[str, Any], shown: str
) -> None:
    routes = parse([doc("b-new", spec("/b", **{field: second})), doc("a-old", spec("/a", **{field: first}))])
    for ordering in (routes, list(reversed(routes))):
        translator = RouteTranslator(GatewaySettings())
        translation = translator.translate(ordering)
        assert [r.id for r in translation.model] == ["shop/a-old"]
        [(loser, message)] = translator.quarantined.items()
        assert loser == "shop/b-new"
        assert message.startswith("file:r.yaml:1: ")
        assert f"{field} for shop/inventory:8080" in message and shown in message
        assert "shop/a-old (file:r.yaml:" in message
    [data] = clusters(translation).values()
    assert data["name"] == "shop/inventory:8080"


def test_contradicting_connect_timeouts_are_a_conflict_too() -> None:
    routes = parse([
        doc("a", spec("/a", timeouts={"connect": "1s"})),
        doc("b", spec("/b", timeouts={"connect": "2s"})),
    ])
    translator = RouteTranslator(GatewaySettings())
    translation = translator.translate(routes)
    assert list(translator.quarantined) == ["shop/b"]
    assert "timeouts.connect for shop/inventory:8080 is 2s here but 1s in shop/a" in translator.quarantined["shop/b"]
    assert clusters(translation)["shop/inventory:8080"]["connect_timeout"] == "1s"


def test_the_same_settings_on_two_routes_agree_and_other_services_are_untouched() -> None:
    breaker = {"maxConnections": 2, "maxPendingRequests": 1}
    routes = parse([
        doc("a", spec("/a", circuitBreaker=breaker)),
        doc("b", spec("/b", circuitBreaker=dict(breaker))),
        doc("c", spec("/c", service="other", circuitBreaker={"maxConnections": 9})),
    ])
    translator = RouteTranslator(GatewaySettings())
    by_name = clusters(translator.translate(routes))
    assert translator.quarantined == {}
    assert by_name["shop/inventory:8080"]["circuit_breakers"]["thresholds"][0]["max_connections"] == 2
    assert by_name["shop/other:8080"]["circuit_breakers"]["thresholds"][0]["max_connections"] == 9


def test_a_changed_setting_rebuilds_the_cluster() -> None:
    translator = RouteTranslator(GatewaySettings())
    first = translator.translate(parse([doc("a", spec("/a", circuitBreaker={"maxConnections": 2}))]))
    second = translator.translate(parse([doc("a", spec("/a", circuitBreaker={"maxConnections": 3}))]))
    assert first.clusters[0].version != second.clusters[0].version
    assert resource_data(second.clusters[0])["circuit_breakers"]["thresholds"][0]["max_connections"] == 3


def test_failure_percentage_and_success_rate_ejection_are_enforced() -> None:
    outlier = {
        "failurePercentage": {"threshold": 50, "minimumHosts": 2, "requestVolume": 10},
        "successRate": {"stdevFactor": 1.5, "minimumHosts": 3, "requestVolume": 20},
        "maxEjectionPercent": 34,
    }
    [data] = clusters(RouteTranslator(GatewaySettings()).translate(parse([doc("a", spec("/a", outlierDetection=outlier))]))).values()
    assert data["outlier_detection"] == {
        "max_ejection_percent": 34,
        "failure_percentage_threshold": 50,
        "enforcing_failure_percentage": 100,
        "failure_percentage_minimum_hosts": 2,
        "failure_percentage_request_volume": 10,
        "success_rate_stdev_factor": 1500,
        "enforcing_success_rate": 100,
        "success_rate_minimum_hosts": 3,
        "success_rate_request_volume": 20,
    }


def test_failure_percentage_defaults_follow_envoys() -> None:
    [data] = clusters(
        RouteTranslator(GatewaySettings()).translate(parse([doc("a", spec("/a", outlierDetection={"failurePercentage": {"threshold": 80}}))]))
    ).values()
    detection = data["outlier_detection"]
    assert (detection["failure_percentage_minimum_hosts"], detection["failure_percentage_request_volume"]) == (5, 50)


def test_resilience_fields_are_no_longer_reported_as_unenforced() -> None:
    [route] = parse([doc("a", spec("/a", circuitBreaker={"maxConnections": 2}, outlierDetection={"consecutive5xx": 2},
                                   healthCheck={"path": "/health"}))])
    assert unenforced(route, GatewaySettings()) == [] and refusals(route, GatewaySettings()) == []


def test_request_timeout_defaults_to_10s_and_per_try_to_8s_with_retries() -> None:
    routes = parse([
        doc("plain", spec("/plain")),
        doc("retried", spec("/retried", retries={"attempts": 1}, match={"pathPrefix": "/retried", "methods": ["GET"]})),
        doc("short", spec("/short", retries={"attempts": 1}, timeouts={"request": "5s"},
                          match={"pathPrefix": "/short", "methods": ["GET"]})),
    ])
    [config] = [resource_data(r) for r in RouteTranslator(GatewaySettings()).translate(routes).routes]
    entries = {e["name"]: e["route"] for e in config["virtual_hosts"][-1]["routes"]}
    assert entries["shop/plain"]["timeout"] == "10s" and "retry_policy" not in entries["shop/plain"]
    assert entries["shop/retried"]["timeout"] == "10s"
    assert entries["shop/retried"]["retry_policy"]["per_try_timeout"] == "8s"
    assert entries["shop/short"]["timeout"] == "5s"
    assert "per_try_timeout" not in entries["shop/short"]["retry_policy"]


@pytest.mark.parametrize(
    "timeouts, message",
    [
        ({"request": "10s", "perTry": "12s"}, "perTry (12s) must not exceed request (10s)"),
        ({"perTry": "12s"}, "perTry (12s) must not exceed request (10s, the default)"),
        ({"request": "30s", "idle": "20s"}, "request (30s) must not exceed idle (20s)"),
        ({"idle": "5s"}, "request (10s, the default) must not exceed idle (5s)"),
        ({"connect": "2s", "perTry": "1s", "request": "5s"}, "connect (2s) must be less than perTry (1s)"),
        ({"connect": "5s", "request": "5s"}, "connect (5s) must be less than request (5s)"),
        ({"connect": "11s"}, "connect (11s) must be less than request (10s, the default)"),
    ],
)
def test_a_broken_timeout_hierarchy_names_both_values(timeouts: dict[str, str], message: str) -> None:
    assert problems_of(timeouts) == [f"spec.timeouts: {message}"]


def test_a_well_ordered_hierarchy_is_accepted() -> None:
    assert problems_of({"connect": "250ms", "perTry": "2s", "request": "5s", "idle": "1m"}) == []
    assert problems_of({"request": "5s", "perTry": "5s", "idle": "5s"}) == []


def test_health_check_timeout_within_interval() -> None:
    text = yaml.safe_dump(doc("t", spec("/t", healthCheck={"path": "/h", "interval": "1s", "timeout": "2s"})), sort_keys=False)
    _, problems = parse_route_file(text, Origin("file", "t.yaml"))
    assert [str(p).split(": ", 1)[1] for p in problems] == [
        "spec.healthCheck: healthCheck.timeout (2s) must not exceed healthCheck.interval (1s)"
    ]


def test_the_per_try_default_with_retries_is_part_of_the_hierarchy() -> None:
    assert problems_of({"connect": "9s", "request": "20s"}, retries={"attempts": 1}) == [
        "spec.timeouts: connect (9s) must be less than perTry (8s, the default with retries); set timeouts.perTry"
    ]
    assert problems_of({"connect": "9s", "request": "20s", "perTry": "15s"}, retries={"attempts": 1}) == []
    assert problems_of({"connect": "9s", "request": "20s"}) == []
