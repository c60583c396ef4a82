"""Back pressure: the admission control filter on the route's cluster, and who agrees on it."""

from __future__ import annotations

from typing import Any

from control_plane.render import resource_data
from control_plane.translator import GatewaySettings, RouteTranslator
from control_plane.translator.back_pressure import ADMISSION_CONTROL_FILTER, success_ranges
from tests.unit.control_plane.translator.test_resilience_translation import clusters, doc, parse, spec


def upstream_filters(cluster: dict[str, Any]) -> list[str]:
    options = cluster.get("typed_extension_protocol_options", {})
    http = options.get("envoy.extensions.upstreams.http.v3.HttpProtocolOptions", {})
    return [f["name"] for f in http.get("http_filters", [])]


def test_success_is_every_status_failOn_does_not_name() -> None:
    assert success_ranges(["5xx", "429"]) == [{"start": 100, "end": 429}, {"start": 430, "end": 500}]
    assert success_ranges(["503"]) == [{"start": 100, "end": 503}, {"start": 504, "end": 600}]
    assert success_ranges(["599", "400"]) == [{"start": 100, "end": 400}, {"start": 401, "end": 599}]


def test_only_the_clusters_of_back_pressure_routes_get_the_filter() -> None:
    routes = parse([
        doc("a", spec("/a", "inventory", backPressure={"failOn": [503]})),
        doc("b", spec("/b", "inventory", backPressure={"failOn": [503]})),
        doc("c", spec("/c", "web")),
    ])
    translator = RouteTranslator(GatewaySettings())
    found = clusters(translator.translate(routes))
    assert translator.quarantined == {}
    assert upstream_filters(found["shop/inventory:8080"]) == [ADMISSION_CONTROL_FILTER, "envoy.filters.http.upstream_codec"]
    assert upstream_filters(found["shop/web:8080"]) == []
    assert "typed_extension_protocol_options" not in found["shop/web:8080"]


def test_routes_to_one_service_port_must_agree_on_back_pressure() -> None:
    routes = parse([
        doc("a", spec("/a", backPressure={"successRateThreshold": 90})),
        doc("b", spec("/b", backPressure={"successRateThreshold": 80})),
        doc("c", spec("/c")),
    ])
    translator = RouteTranslator(GatewaySettings())
    translation = translator.translate(routes)
    assert list(translator.quarantined) == ["shop/b"]
    assert "backPressure for shop/inventory:8080" in translator.quarantined["shop/b"]
    assert "in shop/a" in translator.quarantined["shop/b"]
    # A route that leaves it unset shares the cluster, and with it the throttling.
    assert {r.id for r in translation.model} == {"shop/a", "shop/c"}
    [data] = [resource_data(r) for r in translation.clusters if r.name == "shop/inventory:8080"]
    assert upstream_filters(data)[0] == ADMISSION_CONTROL_FILTER
