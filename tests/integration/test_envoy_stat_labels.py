"""Envoy's Prometheus output through the real control plane: per-cluster and per-route
golden signals come out as labels (envoy_cluster_name, envoy_virtual_host, envoy_route),
not folded into metric names, so one dashboard query covers every service and route."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.harness.http_client import wait_for
from tests.harness.route_repo import route_doc
from tests.integration.conftest import StackFactory

BACKEND = [{"service": "svc-a", "port": 8080}]


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The parser names every counter sample ``<family>_total``, as OpenMetrics does."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def test_clusters_and_routes_are_prometheus_labels(make_stack: StackFactory) -> None:
    stack = make_stack(upstreams=("svc-a",))
    stack.commit_routes(
        {
            "r.yaml": [
                route_doc("echo", {"auth": {"required": False}, "match": {"pathPrefix": "/echo"}, "backends": BACKEND}),
                route_doc("orders.v2", {"auth": {"required": False}, "hosts": ["api.example.com"], "match": {"pathPrefix": "/orders"}, "backends": BACKEND}),
            ]
        }
    )
    stack.start(wait_path="/echo")
    assert stack.envoy is not None
    before = stack.envoy.admin_get("/stats/prometheus")  # start-up polled /echo already
    for _ in range(3):
        assert stack.get("/echo").status == 200
    assert stack.get("/echo?status=503").status == 503
    assert stack.get("/orders", headers={"host": "api.example.com"}).status == 200
    text = stack.envoy.admin_get("/stats/prometheus")

    def moved(name: str, labels: dict[str, str]) -> float:
        key = tuple(sorted(labels.items()))
        return samples(text, name)[key] - samples(before, name).get(key, 0.0)

    assert not [line for line in text.splitlines() if line.startswith("envoy_cluster_svc")], "a cluster name leaked into metric names"
    assert moved("envoy_cluster_upstream_rq_total", {"envoy_cluster_name": "default_svc-a_8080"}) == 5
    echo = {"envoy_route": "default/echo", "envoy_virtual_host": "any"}
    assert moved("envoy_vhost_route_upstream_rq_total", echo) == 4
    assert moved("envoy_vhost_route_upstream_rq_xx_total", {**echo, "envoy_response_code_class": "5"}) == 1
    # Histograms are merged from the workers at each stats flush (every 5 s by default).
    def latency_counted() -> bool:
        nonlocal text
        assert stack.envoy is not None
        text = stack.envoy.admin_get("/stats/prometheus")
        key = tuple(sorted(echo.items()))
        timed = samples(text, "envoy_vhost_route_upstream_rq_time_count").get(key)
        return timed == samples(text, "envoy_vhost_route_upstream_rq_total")[key]

    wait_for(latency_counted, 12, "the route's latency histogram to count every request", 0.25)
    orders = {"envoy_route": "default/orders_v2", "envoy_virtual_host": "host_api_example_com"}
    assert moved("envoy_vhost_route_upstream_rq_total", orders) == 1
