"""Services + EndpointSlices → endpoints: ready-only, merged, ports by name, zones kept."""

from __future__ import annotations

from typing import Any

from control_plane.sources.base import LayeredEndpoints
from control_plane.sources.kubernetes.endpoints import KubernetesEndpoints
from control_plane.sources.static_endpoints import parse_endpoints
from control_plane.translator import ClusterRef, Endpoint


def service(name: str, ports: list[dict[str, Any]], namespace: str = "shop") -> dict[str, Any]:
    """With a selector: the EndpointSlice controller's slices are the ones used (endpoint_trust)."""
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"ports": ports, "selector": {"app": name}}}


def endpoint_slice(name: str, service_name: str, ports: list[dict[str, Any]], endpoints: list[dict[str, Any]], *, namespace: str = "shop", address_type: str = "IPv4") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"kubernetes.io/service-name": service_name, "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"},
        },
        "addressType": address_type,
        "ports": ports,
        "endpoints": endpoints,
    }


def ep(address: str, zone: str = "", **conditions: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"addresses": [address], "conditions": conditions}
    if zone:
        out["zone"] = zone
    return out


def table_with(*slices: dict[str, Any]) -> KubernetesEndpoints:
    table = KubernetesEndpoints()
    table.apply_services(
        {"shop/orders": service("orders", [{"name": "http", "port": 8080, "targetPort": 9000}, {"name": "admin", "port": 9090}])}
    )
    table.apply_slices({f"shop/{s['metadata']['name']}": s for s in slices})
    return table


HTTP = ClusterRef("shop", "orders", 8080)


def test_only_ready_serving_not_terminating_endpoints_are_used() -> None:
    table = table_with(
        endpoint_slice(
            "orders-a",
            "orders",
            [{"name": "http", "port": 9000}],
            [
                ep("10.0.0.1", ready=True),
                ep("10.0.0.2"),  # conditions unset: ready
                ep("10.0.0.3", ready=False),
                ep("10.0.0.4", ready=True, serving=False),
                ep("10.0.0.5", ready=True, terminating=True),
            ],
        )
    )
    assert table.endpoints_for(HTTP) == (Endpoint("10.0.0.1", 9000), Endpoint("10.0.0.2", 9000))


def test_slices_merge_ports_map_by_name_and_zones_become_localities() -> None:
    table = table_with(
        endpoint_slice("orders-a", "orders", [{"name": "http", "port": 9000}, {"name": "admin", "port": 9901}], [ep("10.0.0.1", zone="z1")]),
        endpoint_slice("orders-b", "orders", [{"name": "http", "port": 9000}], [ep("10.0.0.2", zone="z2"), ep("10.0.0.1", zone="z1")]),
        endpoint_slice("orders-fqdn", "orders", [{"name": "http", "port": 9000}], [ep("orders.example.com")], address_type="FQDN"),
    )
    assert table.endpoints_for(HTTP) == (Endpoint("10.0.0.1", 9000, "z1"), Endpoint("10.0.0.2", 9000, "z2"))
    assert table.endpoints_for(ClusterRef("shop", "orders", 9090)) == (Endpoint("10.0.0.1", 9901, "z1"),)
    assert table.endpoints_for(ClusterRef("shop", "orders", 7777)) == ()
    assert table.endpoints_for(ClusterRef("other", "orders", 8080)) == ()


def test_changes_and_deletions_are_seen() -> None:
    table = table_with(endpoint_slice("orders-a", "orders", [{"name": "http", "port": 9000}], [ep("10.0.0.1")]))
    assert len(table.endpoints_for(HTTP)) == 1
    table.apply_slices({"shop/orders-a": endpoint_slice("orders-a", "orders", [{"name": "http", "port": 9000}], [ep("10.0.0.1"), ep("10.0.0.9")])})
    assert len(table.endpoints_for(HTTP)) == 2
    table.apply_slices({"shop/orders-a": None})
    assert table.endpoints_for(HTTP) == ()
    table.apply_services({"shop/orders": None})
    assert not table.knows(HTTP)


def test_layered_table_prefers_the_cluster_and_falls_back_to_the_file() -> None:
    table = table_with(endpoint_slice("orders-a", "orders", [{"name": "http", "port": 9000}], [ep("10.0.0.1")]))
    static = parse_endpoints(b"services:\n  orders: [127.0.0.1:1]\n  payments: [127.0.0.1:2]\n", "endpoints.yaml")
    layered = LayeredEndpoints(table, static)
    assert layered.endpoints_for(HTTP) == (Endpoint("10.0.0.1", 9000),)
    assert layered.endpoints_for(ClusterRef("shop", "payments", 80)) == (Endpoint("127.0.0.1", 2),)
