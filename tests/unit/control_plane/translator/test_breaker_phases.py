"""The translator acts on the board's phases: a move re-translates that route alone, CLOSED
is the route's usual output, Retry-After counts to open_until, and the runtime's publisher
rebuilds on every move (the golden case breaker_phases shows the whole output)."""

from __future__ import annotations

import asyncio
from typing import Any

from control_plane.breakers.board import Actor, BreakerBoard, Phase
from control_plane.cache.snapshot_cache import SnapshotCache
from control_plane.model import Origin, Route, parse_route_file
from control_plane.render import resource_data
from control_plane.snapshots import SnapshotPublisher
from control_plane.sources.base import RouteSet
from control_plane.sources.static_endpoints import StaticEndpointTable
from control_plane.translator import GatewaySettings, RouteTranslator
from control_plane.translator.breaker_phases import retry_after_seconds

ROUTES = """\
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: orders, namespace: shop}
spec:
  auth: {required: false}
  match: {pathPrefix: /orders}
  backends: [{service: orders, port: 8080}]
  circuitBreaker: {errorRate: {windowCalls: 40, halfOpenProbes: 2}}
---
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: carts, namespace: shop}
spec:
  auth: {required: false}
  match: {pathPrefix: /carts}
  backends: [{service: carts, port: 8080}]
"""


def load() -> list[Route]:
    routes, problems = parse_route_file(ROUTES, Origin("git", "routes.yaml", revision="a" * 40))
    assert problems == []
    return routes


def entries(translator: RouteTranslator, routes: list[Route], board: BreakerBoard) -> dict[str, dict[str, Any]]:
    translation = translator.translate(routes, board.states())
    return {e["name"]: e for e in resource_data(translation.routes[0])["virtual_hosts"][0]["routes"]}


def test_a_move_retranslates_that_route_alone_and_closing_gives_the_usual_entry() -> None:
    clock = [1000.0]
    board = BreakerBoard(clock=lambda: clock[0])
    translator = RouteTranslator(GatewaySettings(), clock=lambda: clock[0])
    routes = load()
    closed = entries(translator, routes, board)
    assert translator.translated_routes == 2

    board.move("shop/orders", Phase.OPEN, actor=Actor.OPERATOR, reason="t", open_for=4.2)
    clock[0] += 1.0
    opened = entries(translator, routes, board)
    assert translator.translated_routes == 3, "only the moved route"
    assert opened["shop/orders"]["direct_response"]["status"] == 503
    assert {"key": "retry-after", "value": "4"} in [h["header"] for h in opened["shop/orders"]["response_headers_to_add"]]
    assert opened["shop/carts"] == closed["shop/carts"]

    entries(translator, routes, board)
    assert translator.translated_routes == 3, "an unchanged OPEN state is served from the cache"

    board.move("shop/orders", Phase.HALF_OPEN, actor=Actor.OPERATOR, reason="t")
    half = entries(translator, routes, board)["shop/orders"]
    bucket = half["typed_per_filter_config"]["envoy.filters.http.local_ratelimit"]
    assert bucket["token_bucket"]["max_tokens"] == 2 and bucket["stat_prefix"] == "breaker_probes_2"
    assert half["route"] == closed["shop/orders"]["route"], "the probes go to the backends"

    board.move("shop/orders", Phase.CLOSED, actor=Actor.OPERATOR, reason="t")
    assert entries(translator, routes, board) == closed


def test_a_push_while_half_open_carries_only_the_probes_not_yet_spent() -> None:
    """Envoy rebuilds the bucket full on every route-table push: it must hold only what is left."""
    board = BreakerBoard(clock=lambda: 1000.0)
    translator = RouteTranslator(GatewaySettings(), clock=lambda: 1000.0)
    routes = load()
    board.move("shop/orders", Phase.HALF_OPEN, actor=Actor.OPERATOR, reason="t")
    bucket = entries(translator, routes, board)["shop/orders"]["typed_per_filter_config"]["envoy.filters.http.local_ratelimit"]
    assert bucket["token_bucket"]["max_tokens"] == 2

    board.spend_probes("shop/orders", 1)
    assert board.get("shop/orders").phase is Phase.HALF_OPEN and board.get("shop/orders").generation == 1
    bucket = entries(translator, routes, board)["shop/orders"]["typed_per_filter_config"]["envoy.filters.http.local_ratelimit"]
    assert bucket["token_bucket"] == {"max_tokens": 1, "tokens_per_fill": 1, "fill_interval": "31536000s"}

    board.spend_probes("shop/orders", 2)
    spent = entries(translator, routes, board)["shop/orders"]
    assert "envoy.filters.http.local_ratelimit" not in spent.get("typed_per_filter_config", {})
    assert spent["direct_response"]["status"] == 503, "no probe left: the fallback (circuit_open), not the backends"
    headers = {h["header"]["key"]: h["header"]["value"] for h in spent["response_headers_to_add"]}
    assert headers["x-gatehouse-breaker"] == "half-open" and headers["retry-after"] == "1"


def test_spent_probes_count_only_in_half_open_and_never_go_down() -> None:
    board = BreakerBoard(clock=lambda: 1000.0)
    board.spend_probes("shop/orders", 2)
    assert board.get("shop/orders").probes_spent == 0, "CLOSED: nothing to spend"
    board.move("shop/orders", Phase.HALF_OPEN, actor=Actor.OPERATOR, reason="t")
    board.spend_probes("shop/orders", 2)
    board.spend_probes("shop/orders", 1)
    assert board.get("shop/orders").probes_spent == 2
    board.move("shop/orders", Phase.HALF_OPEN, actor=Actor.OPERATOR, reason="t")
    assert board.get("shop/orders").probes_spent == 0, "a fresh HALF_OPEN, a fresh budget"


def test_retry_after_rounds_up_and_is_at_least_one_second() -> None:
    board = BreakerBoard(clock=lambda: 100.0)
    state = board.move("a/b", Phase.OPEN, actor=Actor.DETECTOR, reason="t", open_for=2.01)
    assert retry_after_seconds(state, 100.0) == 3
    assert retry_after_seconds(state, 102.0) == 1
    assert retry_after_seconds(state, 500.0) == 1


async def test_the_publisher_rebuilds_on_a_board_move() -> None:
    cache = SnapshotCache()
    publisher = SnapshotPublisher(
        cache, RouteTranslator(GatewaySettings()), edges={}, feedback=[], quiet=0.001, max_delay=0.01
    )
    board = BreakerBoard()
    publisher.attach_breakers(board)
    task = asyncio.create_task(publisher.run())
    try:
        publisher.publish_routes(RouteSet(source="git", revision="a", routes=tuple(load()), seen_at=0.0))
        publisher.endpoint_publisher(0)(StaticEndpointTable({}), 0.0)
        publisher.open()
        for _ in range(200):
            await asyncio.sleep(0.005)
            if cache.current("*") is not None:
                break
        first = cache.current("*")
        assert first is not None
        board.move("shop/orders", Phase.OPEN, actor=Actor.OPERATOR, reason="t", open_for=30)
        for _ in range(200):
            await asyncio.sleep(0.005)
            current = cache.current("*")
            if current is not None and current.version != first.version:
                break
        current = cache.current("*")
        assert current is not None and current.version != first.version, "a move is pushed with no other change"
        assert b"circuit_open" in b"".join(r.body for r in current.routes.values())
    finally:
        task.cancel()


FALLBACK_ROUTES = """\
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: catalog, namespace: shop}
spec:
  auth: {required: false}
  match: {pathPrefix: /catalog}
  backends: [{service: catalog, port: 8080}]
  circuitBreaker: {errorRate: {windowCalls: 40, halfOpenProbes: 2}}
  fallback: {response: {status: 200, body: '{"stale": true}'}}
---
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: search, namespace: shop}
spec:
  auth: {required: false}
  match: {pathPrefix: /search}
  backends: [{service: search, port: 8080}]
  circuitBreaker: {errorRate: {windowCalls: 40}}
  fallback: {backend: {service: search-cache, port: 8080}}
---
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: orders, namespace: shop}
spec:
  auth: {required: false}
  match: {pathPrefix: /orders}
  backends: [{service: orders, port: 8080}]
  circuitBreaker: {errorRate: {windowCalls: 40}}
"""


def test_half_open_non_probes_are_marked_and_matched_again_to_the_open_fallback_ahead() -> None:
    routes, problems = parse_route_file(FALLBACK_ROUTES, Origin("git", "routes.yaml", revision="a" * 40))
    assert problems == []
    board = BreakerBoard(clock=lambda: 1000.0)
    translator = RouteTranslator(GatewaySettings(), clock=lambda: 1000.0)
    opened: dict[str, list[dict[str, Any]]] = {}
    for route in routes:
        board.move(route.id, Phase.OPEN, actor=Actor.OPERATOR, reason="t", open_for=30)
    for entry in resource_data(translator.translate(routes, board.states()).routes[0])["virtual_hosts"][0]["routes"]:
        opened.setdefault(entry["name"], []).append(entry)
    for route in routes:
        board.move(route.id, Phase.HALF_OPEN, actor=Actor.OPERATOR, reason="t")
    half: dict[str, list[dict[str, Any]]] = {}
    for entry in resource_data(translator.translate(routes, board.states()).routes[0])["virtual_hosts"][0]["routes"]:
        half.setdefault(entry["name"], []).append(entry)
    mark = {"name": "x-gatehouse-breaker", "string_match": {"exact": "half-open"}}

    for name in ("shop/catalog", "shop/search"):
        non_probe, probe = half[name]
        assert non_probe["match"]["headers"] == [mark], "the fallback entry matches only marked requests, first"
        [open_entry] = opened[name]
        assert {k: v for k, v in non_probe.items() if k not in ("match", "request_headers_to_add", "response_headers_to_add")} == {
            k: v for k, v in open_entry.items() if k not in ("match", "request_headers_to_add", "response_headers_to_add")
        }, "a non-probe is answered as OPEN answers"
        marks = [h["header"]["value"] for h in non_probe["response_headers_to_add"] if h["header"]["key"] == "x-gatehouse-breaker"]
        assert marks == ["half-open"]
        bucket = probe["typed_per_filter_config"]["envoy.filters.http.local_ratelimit"]
        assert bucket["filter_enforced"]["default_value"].get("numerator", 0) == 0, "shadow mode: the bucket never denies"
        assert bucket["request_headers_to_add_when_not_enforced"][0]["header"] == {"key": "x-gatehouse-breaker", "value": "half-open"}
        assert probe["typed_per_filter_config"]["gatehouse.breaker_reroute"]["@type"].endswith("route.v3.FilterConfig")
        assert "headers" not in probe["match"]
    assert half["shop/search"][0]["route"]["cluster"] == "shop/search-cache:8080"
    assert half["shop/search"][1]["route"]["cluster"] == "shop/search:8080"

    [orders] = half["shop/orders"]
    bucket = orders["typed_per_filter_config"]["envoy.filters.http.local_ratelimit"]
    assert bucket["filter_enforced"]["default_value"]["numerator"] == 100, "circuitOpen: the bucket denies (circuit_open)"
    assert "gatehouse.breaker_reroute" not in orders["typed_per_filter_config"]


def test_with_every_probe_spent_a_fallback_route_is_its_open_fallback_alone() -> None:
    routes, problems = parse_route_file(FALLBACK_ROUTES, Origin("git", "routes.yaml", revision="a" * 40))
    assert problems == []
    board = BreakerBoard(clock=lambda: 1000.0)
    translator = RouteTranslator(GatewaySettings(), clock=lambda: 1000.0)
    for route in routes:
        board.move(route.id, Phase.HALF_OPEN, actor=Actor.OPERATOR, reason="t")
        board.spend_probes(route.id, 100)
    half: dict[str, list[dict[str, Any]]] = {}
    for entry in resource_data(translator.translate(routes, board.states()).routes[0])["virtual_hosts"][0]["routes"]:
        half.setdefault(entry["name"], []).append(entry)
    [search] = half["shop/search"]
    assert search["route"]["cluster"] == "shop/search-cache:8080" and "headers" not in search["match"]
    assert "typed_per_filter_config" not in search or "gatehouse.breaker_reroute" not in search["typed_per_filter_config"]
    [catalog] = half["shop/catalog"]
    assert "direct_response" in catalog
    marks = [h["header"]["value"] for h in catalog["response_headers_to_add"] if h["header"]["key"] == "x-gatehouse-breaker"]
    assert marks == ["half-open"]
