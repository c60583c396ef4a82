"""The translator re-translates only what changed; EDS resources are reused when endpoints are."""

from __future__ import annotations

from dataclasses import replace

from control_plane.model import Origin, Route, parse_route_file
from control_plane.render import resource_data
from control_plane.sources.static_endpoints import parse_endpoints
from control_plane.translator import ClusterRef, EndpointTranslator, GatewaySettings, RouteTranslator

ROUTES = """\
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: orders, namespace: shop}
spec:
  auth: {required: false}
  match: {path: "/orders/{id}"}
  backends: [{service: order-service, port: 8080}]
  retries: {attempts: 2}
---
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: carts, namespace: shop}
spec:
  auth: {required: false}
  match: {pathPrefix: /carts}
  backends: [{service: cart, port: 8080, weight: 3}, {service: cart-v2, port: 8080}]
---
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: maintenance, namespace: shop}
spec:
  auth: {required: false}
  match: {path: /old/**}
  disabled: {status: 410}
"""


def load(text: str = ROUTES) -> list[Route]:
    routes, problems = parse_route_file(text, Origin("git", "routes.yaml", revision="a" * 40))
    assert problems == []
    return routes


def by_name(routes: list[Route], name: str) -> Route:
    return next(r for r in routes if r.name == name)


def test_the_same_route_objects_are_not_translated_again() -> None:
    routes = load()
    translator = RouteTranslator(GatewaySettings())
    first = translator.translate(routes)
    assert translator.translated_routes == 3
    second = translator.translate(list(reversed(routes)))
    assert translator.translated_routes == 3, "nothing changed, nothing re-translated"
    assert [r.body for r in second.routes] == [r.body for r in first.routes]
    assert second.listeners[0] is first.listeners[0]


def test_changing_one_route_translates_exactly_that_one() -> None:
    routes = load()
    translator = RouteTranslator(GatewaySettings())
    before = translator.translate(routes)
    changed = load(ROUTES.replace("pathPrefix: /carts", "pathPrefix: /basket"))
    mixed = [by_name(routes, "orders"), by_name(changed, "carts"), by_name(routes, "maintenance")]
    after = translator.translate(mixed)
    assert translator.translated_routes == 4
    assert before.routes[0].version != after.routes[0].version
    prefixes = [r["match"].get("prefix") for r in resource_data(after.routes[0])["virtual_hosts"][0]["routes"]]
    assert "/basket" in prefixes and "/carts" not in prefixes


def test_an_equal_but_new_route_object_is_translated_again() -> None:
    """The cache keys on identity: a re-parsed, unchanged document is a new Route (by design)."""
    translator = RouteTranslator(GatewaySettings())
    first = translator.translate(load())
    second = translator.translate(load())
    assert translator.translated_routes == 6
    assert first.routes[0].body == second.routes[0].body


def test_a_removed_route_leaves_the_cache_and_the_output() -> None:
    routes = load()
    translator = RouteTranslator(GatewaySettings())
    translator.translate(routes)
    without_orders = [r for r in routes if r.name != "orders"]
    result = translator.translate(without_orders)
    assert b"shop/orders" not in result.routes[0].body
    assert ClusterRef("shop", "order-service", 8080) not in result.cluster_refs
    assert [c.name for c in result.clusters] == ["shop/cart:8080", "shop/cart-v2:8080"]
    # Putting the very same object back translates it again: the cache holds only the latest call.
    translator.translate(routes)
    assert translator.translated_routes == 4


def test_unchanged_clusters_keep_their_resource() -> None:
    routes = load()
    translator = RouteTranslator(GatewaySettings())
    first = translator.translate(routes)
    changed = load(ROUTES.replace("service: cart-v2", "service: cart-v3"))
    second = translator.translate([by_name(routes, "orders"), by_name(changed, "carts")])
    kept = {c.name: c for c in first.clusters}
    for cluster in second.clusters:
        if cluster.name in kept:
            assert cluster.body == kept[cluster.name].body and cluster.version == kept[cluster.name].version
    assert {c.name for c in second.clusters} == {"shop/order-service:8080", "shop/cart:8080", "shop/cart-v3:8080"}


def test_cluster_provenance_names_the_routes_that_use_it() -> None:
    text = ROUTES + "---\n" + ROUTES.replace("name: orders,", "name: orders-2,").split("---\n")[0]
    result = RouteTranslator(GatewaySettings()).translate(load(text))
    provenance = {c.name: c.provenance for c in result.clusters}
    assert provenance["shop/order-service:8080"] == ("shop/orders", "shop/orders-2")
    assert provenance["shop/cart:8080"] == ("shop/carts",)
    assert set(result.routes[0].provenance) == {"shop/orders", "shop/orders-2", "shop/carts", "shop/maintenance"}
    assert set(result.routes[0].references) == set(provenance)


ENDPOINTS = """\
services:
  order-service: [10.0.0.1:8080, 10.0.0.2:8080]
  cart: [10.0.1.1:8080]
  cart-v2: []
"""


def test_endpoint_translator_reuses_the_resource_of_an_unchanged_cluster() -> None:
    refs = RouteTranslator(GatewaySettings()).translate(load()).cluster_refs
    translator = EndpointTranslator()
    first = {r.name: r for r in translator.translate(refs, parse_endpoints(ENDPOINTS, "e.yaml"))}
    changed = parse_endpoints(ENDPOINTS.replace("[10.0.1.1:8080]", "[10.0.1.1:8080, 10.0.1.2:8080]"), "e.yaml")
    second = {r.name: r for r in translator.translate(refs, changed)}
    assert set(first) == set(second) == {"shop/order-service:8080", "shop/cart:8080", "shop/cart-v2:8080"}
    assert second["shop/order-service:8080"] is first["shop/order-service:8080"]
    assert second["shop/cart-v2:8080"] is first["shop/cart-v2:8080"]
    assert second["shop/cart:8080"] is not first["shop/cart:8080"]
    assert second["shop/cart:8080"].version != first["shop/cart:8080"].version
    # And with nothing changed at all, every resource is the same object.
    third = {r.name: r for r in translator.translate(refs, changed)}
    assert all(third[name] is second[name] for name in third)


def test_endpoint_translator_forgets_clusters_no_longer_referenced() -> None:
    refs = RouteTranslator(GatewaySettings()).translate(load()).cluster_refs
    table = parse_endpoints(ENDPOINTS, "e.yaml")
    translator = EndpointTranslator()
    first = {r.name: r for r in translator.translate(refs, table)}
    fewer = tuple(ref for ref in refs if ref.service != "cart")
    assert [r.name for r in translator.translate(fewer, table)] == [ref.name for ref in fewer]
    again = {r.name: r for r in translator.translate(refs, table)}
    assert again["shop/cart:8080"] is not first["shop/cart:8080"], "a dropped cluster is rebuilt, not resurrected"
    assert again["shop/cart:8080"].body == first["shop/cart:8080"].body


def test_origin_change_alone_is_a_new_route() -> None:
    """A new commit of the same text is a new Route object, with new provenance in metadata."""
    routes = load()
    moved = [replace(r, origin=replace(r.origin, revision="b" * 40)) for r in routes]
    translator = RouteTranslator(GatewaySettings())
    first = translator.translate(routes)
    second = translator.translate(moved)
    assert translator.translated_routes == 6
    assert first.routes[0].body != second.routes[0].body
    assert b"@bbbbbbbbbbbb" in second.routes[0].body
