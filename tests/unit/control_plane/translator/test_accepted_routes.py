"""Whatever the schema accepts, the translator can build: one bad route must not break translation."""

from __future__ import annotations

import pytest
import yaml

from control_plane.model import Origin, Route, parse_route_file
from control_plane.render import resource_data
from control_plane.translator import GatewaySettings, RouteTranslator
from control_plane.translator.settings import ExtAuthzSettings, RateLimitSettings
from control_plane.translator.virtual_hosts import vhost_name
from tests.unit.control_plane.translator.route_generator import route_documents

ENFORCING = GatewaySettings(
    ext_authz=ExtAuthzSettings((("127.0.0.1", 9196),), protocol="http"), rate_limit=RateLimitSettings((("127.0.0.1", 8081),))
)


def parse(documents: list[dict[str, object]]) -> list[Route]:
    text = yaml.safe_dump_all(documents, sort_keys=False)
    routes, problems = parse_route_file(text, Origin("file", "generated.yaml"))
    assert problems == [], [str(p) for p in problems]
    return routes


def _covers(host: str, domain: str) -> bool:
    """Envoy picks the most specific virtual host, so a route on `host` must be on `domain` too."""
    return host == domain or (host.startswith("*.") and domain.endswith(host[1:]))


def _host_rank(route: Route, domain: str) -> tuple[int, int]:
    """How closely a route's hosts name `domain`: (0, 0) exact, (1, -length of its longest
    wildcard covering it), (2, 0) host-less (no hosts, or "*" among them)."""
    hosts = list(route.spec.hosts)
    if not hosts or "*" in hosts:
        return (2, 0)
    if domain in hosts:
        return (0, 0)
    return (1, -max(len(h) for h in hosts if h.startswith("*.") and _covers(h, domain)))


@pytest.mark.parametrize("seed", range(30))
def test_random_valid_routes_translate_and_every_route_is_reachable(seed: int) -> None:
    routes = parse(route_documents(seed, 25))
    # The generated routes ask for tokens (auth's default): a gateway that checks them.
    translator = RouteTranslator(ENFORCING)
    translation = translator.translate(routes)
    assert translator.quarantined == {}
    config = resource_data(translation.routes[0])
    vhosts = {vhost["name"]: vhost for vhost in config["virtual_hosts"]}
    domains = [d for vhost in config["virtual_hosts"] for d in vhost["domains"] if d != "*"]
    for route in routes:
        named = [h for h in route.spec.hosts if h != "*"]
        if named and len(named) == len(route.spec.hosts):
            # Its own hosts, and every named host a wildcard of it covers (*.example.com → api.example.com).
            expected_vhosts = sorted({vhost_name(d) for d in domains for h in named if _covers(h, d)})
        else:
            expected_vhosts = list(vhosts)
        actual_vhosts = sorted(name for name, vhost in vhosts.items() if route.id in [e["name"] for e in vhost.get("routes", [])])
        assert actual_vhosts == sorted(expected_vhosts), route.id
    # Within each virtual host, hostname ranks before path (Gateway API): routes naming the
    # host exactly, then wildcard hosts (longer first), then host-less routes; within each
    # of those, the global most-specific-first order. The "any" host has host-less routes only.
    position = {route.id: index for index, route in enumerate(translation.model)}
    by_id = {route.id: route for route in routes}
    for vhost in config["virtual_hosts"]:
        [domain] = vhost["domains"]
        order = [(_host_rank(by_id[entry["name"]], domain), position[entry["name"]]) for entry in vhost.get("routes", [])]
        assert order == sorted(order), vhost["name"]
        if domain == "*":
            assert {rank for rank, _ in order} <= {(2, 0)}, "only host-less routes on the any host"
    # CDS holds exactly the clusters of routes that are not disabled, and every cluster a route names is one.
    enabled = [r for r in routes if r.spec.disabled is None]
    wanted = {f"{b.namespace or r.namespace}/{b.service}:{b.port}" for r in enabled for b in r.spec.backends}
    clusters = {c.name for c in translation.clusters} - {"gatehouse_ext_authz", "gatehouse_ratelimit"}
    assert clusters == wanted
    for vhost in config["virtual_hosts"]:
        for entry in vhost.get("routes", []):
            action = entry.get("route", {})
            named_clusters = [action["cluster"]] if "cluster" in action else [c["name"] for c in action.get("weighted_clusters", {}).get("clusters", [])]
            assert set(named_clusters) <= clusters


def test_a_huge_duration_is_refused_by_the_schema() -> None:
    """`100000000h` used to pass the schema and then fail all of translation (protobuf Duration range)."""
    text = (
        "apiVersion: gatehouse.io/v1alpha1\nkind: Route\nmetadata: {name: r}\n"
        "spec:\n  auth: {required: false}\n  match: {path: /a}\n  backends: [{service: a, port: 80}]\n  timeouts: {request: 100000000h}\n"
    )
    routes, problems = parse_route_file(text, Origin("file", "r.yaml"))
    assert routes == []
    assert [str(p) for p in problems] == ["r.yaml:8: spec.timeouts.request: '100000000h' is longer than the maximum of 720h"]


def test_the_longest_durations_translate() -> None:
    text = (
        "apiVersion: gatehouse.io/v1alpha1\nkind: Route\nmetadata: {name: r}\n"
        "spec:\n  auth: {required: false}\n  match: {path: /a}\n  backends: [{service: a, port: 80}]\n"
        "  timeouts: {request: 720h, perTry: 720h, idle: 720h}\n  retries: {attempts: 1}\n"
    )
    routes = parse_route_file(text, Origin("file", "r.yaml"))[0]
    translator = RouteTranslator(GatewaySettings())
    config = resource_data(translator.translate(routes).routes[0])
    assert translator.quarantined == {}
    action = config["virtual_hosts"][0]["routes"][0]["route"]
    assert (action["timeout"], action["idle_timeout"], action["retry_policy"]["per_try_timeout"]) == ("2592000s",) * 3


# --- quarantine: a route the translator cannot build costs that route only ------------------

TWO_ROUTES = """\
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: good, namespace: shop}
spec:
  auth: {required: false}
  match: {path: /good}
  backends: [{service: good, port: 80}, {service: shared, port: 80}]
---
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: bad, namespace: shop}
spec:
  auth: {required: false}
  match: {path: /bad}
  backends: [{service: bad, port: 80}, {service: shared, port: 80}]
  timeouts: {request: 10s}
"""


def untranslatable(route: Route) -> Route:
    """The same route with a timeout beyond protobuf's Duration range, which no validation lets
    through today: a stand-in for any translator gap (json_format.ParseDict raises ParseError)."""
    timeouts = route.spec.timeouts.model_copy(update={"request": 10**18})
    return Route(route.namespace, route.name, route.spec.model_copy(update={"timeouts": timeouts}), route.origin)


def test_a_route_that_cannot_be_translated_is_quarantined_and_the_rest_is_served() -> None:
    good, bad = parse_route_file(TWO_ROUTES, Origin("file", "two.yaml"))[0]
    broken = untranslatable(bad)
    translator = RouteTranslator(GatewaySettings())
    translation = translator.translate([broken, good])

    assert list(translator.quarantined) == ["shop/bad"]
    reason = translator.quarantined["shop/bad"]
    assert reason.startswith("file:two.yaml:9: ") and "timeout" in reason, reason
    # The quarantined route is nowhere in the config; the good one is complete.
    assert [r.id for r in translation.model] == ["shop/good"]
    assert translation.routes[0].provenance == ("shop/good",)
    config = resource_data(translation.routes[0])
    assert [e["name"] for v in config["virtual_hosts"] for e in v.get("routes", [])] == ["shop/good"]
    # Its own cluster is gone; a cluster it shares with a served route stays.
    assert [c.name for c in translation.clusters] == ["shop/good:80", "shop/shared:80"]
    assert translation.clusters[1].provenance == ("shop/good",)
    assert translator.translated_routes == 1


def test_a_quarantine_ends_when_the_route_is_fixed() -> None:
    good, bad = parse_route_file(TWO_ROUTES, Origin("file", "two.yaml"))[0]
    translator = RouteTranslator(GatewaySettings())
    translator.translate([good, untranslatable(bad)])
    assert list(translator.quarantined) == ["shop/bad"]
    # Still broken on the next round: still quarantined (it is not cached as translated).
    translator.translate([good, untranslatable(bad)])
    assert list(translator.quarantined) == ["shop/bad"]
    translation = translator.translate([good, bad])
    assert translator.quarantined == {}
    assert sorted(r.id for r in translation.model) == ["shop/bad", "shop/good"]
    assert [c.name for c in translation.clusters] == ["shop/bad:80", "shop/good:80", "shop/shared:80"]
