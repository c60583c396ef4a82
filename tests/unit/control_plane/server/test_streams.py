"""SotwStream and DeltaStream end to end, in process, against an Envoy-like fake.

The fake (``fake_envoy.FakeEnvoy``) checks every response as it is written: type URL,
increasing nonces, non-empty versions, one response in flight per type, and make before
break (no route configuration naming a cluster whose CDS and EDS ACKs the server has not
read; no CDS dropping a cluster Envoy's routes use). Snapshots are real translator output.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from envoy.config.cluster.v3 import cluster_pb2
from envoy.service.discovery.v3 import discovery_pb2

from control_plane.cache import Resource, ResourceType, Snapshot, SnapshotCache, content_hash
from control_plane.model import Origin, Route, parse_route_file
from control_plane.proxy_status import ProxyStatus
from control_plane.server.delta import DeltaStream
from control_plane.server.sotw import SotwStream
from control_plane.sources.static_endpoints import parse_endpoints
from control_plane.translator import EndpointTranslator, GatewaySettings, RouteTranslator
from servicekit.audit import CONFIG_NACKED, MemoryAuditSink
from tests.unit.control_plane.server.fake_envoy import ENVOY_TYPES, FakeEnvoy, ProtocolViolation, route_clusters, snapshot_versions

CDS, EDS, LDS, RDS = ResourceType.CLUSTER, ResourceType.ENDPOINT, ResourceType.LISTENER, ResourceType.ROUTE
ORDERS, PAYMENTS, INVENTORY = "shop/orders:8080", "shop/payments:8080", "shop/inventory:8080"
ROUTE_CONFIG = "gatehouse_http"

_ROUTE = """\
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {{name: {name}, namespace: shop}}
spec:
  auth: {{required: false}}
  match: {{pathPrefix: /{name}}}
  backends: [{{service: {service}, port: 8080}}]
"""
_DISABLED = """\
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: retired, namespace: shop}
spec:
  auth: {required: false}
  match: {pathPrefix: /v1}
  disabled: {status: 410, body: gone}
"""

ENDPOINTS = {
    "orders": ["127.0.0.1:9001"],
    "payments": ["127.0.0.1:9002"],
    "inventory": ["127.0.0.1:9003"],
}


class Config:
    """Routes and endpoints → snapshots, through the real translator.

    Like a real source, an unchanged route document yields the same Route object each
    time: the translator's cache and NACK attribution both key on route identity.
    """

    def __init__(self) -> None:
        self._routes = RouteTranslator(GatewaySettings())
        self._endpoints = EndpointTranslator()
        self._parsed: dict[str, Route] = {}

    def _route(self, key: str, text: str) -> Route:
        if key not in self._parsed:
            routes, problems = parse_route_file(text, Origin("git", f"routes/{key}.yaml", "abc"))
            assert not problems and len(routes) == 1, problems
            self._parsed[key] = routes[0]
        return self._parsed[key]

    def snapshot(self, *services: str, endpoints: dict[str, list[str]] | None = None, retired: bool = False) -> Snapshot:
        routes = [self._route(s, _ROUTE.format(name=s, service=s)) for s in services]
        if retired:
            routes.append(self._route("retired", _DISABLED))
        translation = self._routes.translate(routes)
        table = parse_endpoints(yaml.safe_dump({"services": endpoints or ENDPOINTS}).encode(), "x")
        snapshot = Snapshot.build(
            clusters=translation.clusters,
            endpoints=self._endpoints.translate(translation.cluster_refs, table),
            listeners=translation.listeners,
            routes=translation.routes,
            model=translation.model,
        )
        assert snapshot.inconsistencies() == []
        return snapshot


@pytest.fixture(params=["sotw", "delta"])
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def open_stream(protocol: str, cache: SnapshotCache, status: ProxyStatus, envoy: FakeEnvoy) -> Any:
    cls = DeltaStream if protocol == "delta" else SotwStream
    return cls(cache, status, envoy.write)


async def connect(protocol: str, cache: SnapshotCache, status: ProxyStatus, **kwargs: Any) -> FakeEnvoy:
    envoy = FakeEnvoy(delta=protocol == "delta", **kwargs)
    envoy.start(open_stream(protocol, cache, status, envoy))
    await envoy.settle()
    return envoy


def only_proxy(status: ProxyStatus) -> Any:
    assert len(status.proxies) == 1
    return next(iter(status.proxies.values()))


# -- initial connect -------------------------------------------------------------------


async def test_initial_connect_converges_in_make_before_break_order(protocol: str) -> None:
    config = Config()
    snap = config.snapshot("orders", "payments")
    cache, status = SnapshotCache(), ProxyStatus()
    cache.set_snapshot(snap)
    envoy = await connect(protocol, cache, status)

    assert envoy.runs(snap)
    kinds = envoy.types()
    assert kinds[0] == "CDS"
    assert sorted(kinds) == ["CDS", "EDS", "LDS", "RDS"], "each type sent exactly once"
    assert kinds.index("RDS") > kinds.index("EDS") > kinds.index("CDS")
    assert all(r.answer == "ack" for r in envoy.received)
    proxy = only_proxy(status)
    assert (proxy.node_id, proxy.group, proxy.protocol) == ("envoy-1", "gateway", protocol)
    assert proxy.acked == {kind.short: snap.versions[kind] for kind in ENVOY_TYPES}
    assert list(status.nacks) == []

    await envoy.close()
    assert status.proxies == {}


async def test_the_stream_waits_for_a_first_snapshot(protocol: str) -> None:
    cache, status = SnapshotCache(), ProxyStatus()
    envoy = await connect(protocol, cache, status)
    assert envoy.received == []
    assert only_proxy(status).acked == {}

    snap = Config().snapshot("orders")
    cache.set_snapshot(snap)
    await envoy.settle()
    assert envoy.runs(snap)
    await envoy.close()


async def test_a_node_group_with_its_own_snapshot_gets_it_and_others_get_the_default(protocol: str) -> None:
    config = Config()
    default, canary = config.snapshot("orders"), Config().snapshot("payments")
    cache, status = SnapshotCache(), ProxyStatus()
    cache.set_snapshot(default)
    cache.set_snapshot(canary, "canary")
    plain = await connect(protocol, cache, status, node_id="a", group="gateway")
    special = await connect(protocol, cache, status, node_id="b", group="canary")
    assert plain.runs(default)
    assert special.runs(canary)
    await plain.close()
    await special.close()


async def test_unknown_type_urls_are_ignored_and_the_stream_goes_on(protocol: str) -> None:
    cache, status = SnapshotCache(), ProxyStatus()
    snap = Config().snapshot("orders")
    cache.set_snapshot(snap)
    envoy = FakeEnvoy(delta=protocol == "delta")
    runtime_url = "type.googleapis.com/envoy.service.runtime.v3.Runtime"
    first = (
        discovery_pb2.DeltaDiscoveryRequest(type_url=runtime_url)
        if envoy.delta
        else discovery_pb2.DiscoveryRequest(type_url=runtime_url)
    )
    envoy.send(first)
    envoy.start(open_stream(protocol, cache, status, envoy))
    await envoy.settle()
    assert envoy.runs(snap), "the stream stopped serving after a request for an unknown type"
    await envoy.close()


# -- changes -----------------------------------------------------------------------------


async def test_a_route_to_a_new_service_pushes_cds_eds_rds_but_not_lds(protocol: str) -> None:
    config = Config()
    cache, status = SnapshotCache(), ProxyStatus()
    cache.set_snapshot(config.snapshot("orders", "payments"))
    envoy = await connect(protocol, cache, status)
    mark = len(envoy.received)

    after = config.snapshot("orders", "payments", "inventory")
    cache.set_snapshot(after)
    await envoy.settle()

    assert envoy.runs(after)
    assert sorted(envoy.types(mark)) == ["CDS", "EDS", "RDS"]
    cds = envoy.responses(mark, CDS)[0]
    eds = envoy.responses(mark, EDS)[0]
    if protocol == "sotw":
        assert cds.names == [INVENTORY, ORDERS, PAYMENTS], "SotW CDS must carry the whole set"
    else:
        assert cds.names == [INVENTORY], "delta CDS resent unchanged clusters"
    assert eds.names == [INVENTORY], "unchanged endpoints resent"
    rds = envoy.responses(mark, RDS)[0]
    assert route_clusters(rds.resources[ROUTE_CONFIG]) == {ORDERS, PAYMENTS, INVENTORY}
    assert only_proxy(status).acked["RDS"] == after.versions[RDS]
    await envoy.close()


async def test_an_endpoint_change_pushes_only_eds_with_only_the_changed_assignment(protocol: str) -> None:
    config = Config()
    cache, status = SnapshotCache(), ProxyStatus()
    start = config.snapshot("orders", "payments")
    cache.set_snapshot(start)
    envoy = await connect(protocol, cache, status)
    mark = len(envoy.received)

    moved = config.snapshot("orders", "payments", endpoints={**ENDPOINTS, "payments": ["127.0.0.1:9102"]})
    assert moved.versions[RDS] == start.versions[RDS] and moved.versions[CDS] == start.versions[CDS]
    cache.set_snapshot(moved)
    await envoy.settle()

    assert envoy.types(mark) == ["EDS"]
    assert envoy.responses(mark, EDS)[0].names == [PAYMENTS]
    assert envoy.runs(moved)
    await envoy.close()


async def test_a_removed_route_drops_its_cluster_only_after_the_new_routes_are_acked(protocol: str) -> None:
    config = Config()
    cache, status = SnapshotCache(), ProxyStatus()
    cache.set_snapshot(config.snapshot("orders", "payments"))
    envoy = await connect(protocol, cache, status)
    mark = len(envoy.received)

    after = config.snapshot("orders")
    cache.set_snapshot(after)
    await envoy.settle()

    kinds = envoy.types(mark)
    assert "LDS" not in kinds
    assert kinds.index("RDS") < kinds.index("CDS"), "CDS changed before the routes stopped using payments"
    rds = envoy.responses(mark, RDS)[0]
    assert route_clusters(rds.resources[ROUTE_CONFIG]) == {ORDERS}
    cds = envoy.responses(mark, CDS)[0]
    if protocol == "delta":
        assert cds.removed == [PAYMENTS] and cds.names == []
    else:
        assert cds.names == [ORDERS]
    assert envoy.runs(after)
    assert only_proxy(status).acked["CDS"] == after.versions[CDS]
    await envoy.close()


async def test_a_swap_of_backend_keeps_the_old_cluster_through_the_switch(protocol: str) -> None:
    """orders → inventory in one commit: add inventory, switch routes, then drop orders."""
    config = Config()
    cache, status = SnapshotCache(), ProxyStatus()
    cache.set_snapshot(config.snapshot("orders"))
    envoy = await connect(protocol, cache, status)
    mark = len(envoy.received)

    after = config.snapshot("inventory")
    cache.set_snapshot(after)
    await envoy.settle()

    cds = envoy.responses(mark, CDS)
    assert len(cds) == 2
    if protocol == "sotw":
        assert cds[0].names == [INVENTORY, ORDERS], "the first CDS must add inventory and keep orders"
        assert cds[1].names == [INVENTORY]
    else:
        assert (cds[0].names, cds[0].removed) == ([INVENTORY], [])
        assert (cds[1].names, cds[1].removed) == ([], [ORDERS])
    kinds = envoy.types(mark)
    first_cds, rds, last_cds = kinds.index("CDS"), kinds.index("RDS"), len(kinds) - 1 - kinds[::-1].index("CDS")
    assert first_cds < kinds.index("EDS") < rds < last_cds
    assert envoy.runs(after)
    await envoy.close()


# -- clusters Envoy rebuilds ---------------------------------------------------------------


def eds_carrying(envoy: FakeEnvoy, name: str, since: int) -> list[int]:
    """Positions (in ``envoy.received``) of EDS responses since ``since`` that carry ``name``."""
    return [i for i, r in enumerate(envoy.received) if i >= since and r.kind is EDS and name in r.resources]


async def test_a_changed_cluster_warms_on_its_unchanged_endpoints_sent_again(protocol: str) -> None:
    """Envoy rebuilds a changed cluster and waits for an EDS response carrying its
    endpoints (issue 28: a cache route changes its service's cluster, not its endpoints)."""
    config = Config()
    cache, status = SnapshotCache(), ProxyStatus()
    start = config.snapshot("orders", "payments")
    cache.set_snapshot(start)
    envoy = await connect(protocol, cache, status)
    mark = len(envoy.received)

    after = with_cluster_timeout(start, ORDERS, 7)
    assert after.versions[EDS] == start.versions[EDS]
    cache.set_snapshot(after)
    await envoy.settle()

    assert envoy.timed_out == [] and envoy.warming == {}, "the rebuilt cluster was left to time out"
    cds = envoy.responses(mark, CDS)
    assert [r.answer for r in cds] == ["ack"]
    resent = eds_carrying(envoy, ORDERS, mark)
    assert len(resent) == 1, "unchanged endpoints of the rebuilt cluster: sent again exactly once"
    assert envoy.received.index(cds[0]) < resent[0]
    assert envoy.responses(mark, EDS)[0].names == [ORDERS], "endpoints of unchanged clusters resent"
    assert envoy.runs(after)
    assert only_proxy(status).acked["CDS"] == after.versions[CDS]
    await envoy.close()


async def test_a_changed_cluster_and_a_new_one_in_one_snapshot_serve_the_new_route(protocol: str) -> None:
    """The issue's commit: a cache route (changes order-service's cluster) and a route in a
    new namespace (a new cluster). The new route waits for the new cluster's CDS ACK, which
    Envoy withholds until the rebuilt one has warmed."""
    config = Config()
    cache, status = SnapshotCache(), ProxyStatus()
    start = config.snapshot("orders", "payments")
    cache.set_snapshot(start)
    envoy = await connect(protocol, cache, status)
    mark = len(envoy.received)

    after = with_cluster_timeout(config.snapshot("orders", "payments", "inventory"), ORDERS, 7)
    cache.set_snapshot(after)
    await envoy.settle()

    assert envoy.timed_out == [] and envoy.warming == {}
    assert envoy.runs(after), "the new route never reached Envoy"
    rds = envoy.responses(mark, RDS)
    assert len(rds) == 1 and route_clusters(rds[0].resources[ROUTE_CONFIG]) == {ORDERS, PAYMENTS, INVENTORY}
    assert len(eds_carrying(envoy, ORDERS, mark)) == 1
    assert len(eds_carrying(envoy, INVENTORY, mark)) == 1
    await envoy.close()


async def test_the_fakes_rebuilt_cluster_withholds_the_cds_ack_until_its_endpoints_arrive(protocol: str) -> None:
    """The fake's warming model is itself able to fail a server that never resends."""
    config = Config()
    start = config.snapshot("orders")
    after = with_cluster_timeout(start, ORDERS, 7)
    envoy = FakeEnvoy(delta=protocol == "delta")
    envoy.request(CDS)
    responses = {kind: [r.to_any() for r in start.of(kind).values()] for kind in (CDS, EDS)}

    def response(kind: ResourceType, nonce: int, resources: list[Any]) -> Any:
        if envoy.delta:
            return discovery_pb2.DeltaDiscoveryResponse(
                type_url=kind.url, nonce=str(nonce), system_version_info="v",
                resources=[discovery_pb2.Resource(name=ORDERS, version=content_hash(a.value), resource=a) for a in resources],
            )
        return discovery_pb2.DiscoveryResponse(type_url=kind.url, nonce=str(nonce), version_info="v", resources=resources)

    await envoy.write(response(CDS, 1, responses[CDS]))
    await envoy.write(response(EDS, 2, responses[EDS]))
    assert envoy.initialized and [r.answer for r in envoy.received] == ["ack", "ack"]
    envoy.drain()

    await envoy.write(response(CDS, 3, [r.to_any() for r in after.clusters.values()]))
    assert envoy.warming == {ORDERS: ORDERS} and envoy.received[-1].answer == "", "CDS ACKed while a cluster warms"
    sent = envoy.drain()
    if envoy.delta:
        assert sent == [], "a delta Envoy tells nothing when it re-opens a watch"
    else:
        assert [(m.type_url, list(m.resource_names), m.response_nonce) for m in sent] == [(EDS.url, [ORDERS], "2")]
    assert envoy.fetch_timeout() == [ORDERS]
    assert envoy.received[-1].answer == "ack" and envoy.timed_out == [ORDERS]


async def test_delta_answers_a_subscription_to_a_name_envoy_already_has() -> None:
    """The delta protocol: the client may have "forgotten" it; the server must send it."""
    config = Config()
    cache, status = SnapshotCache(), ProxyStatus()
    cache.set_snapshot(config.snapshot("orders", "payments"))
    envoy = await connect("delta", cache, status)
    mark = len(envoy.received)

    envoy.send(discovery_pb2.DeltaDiscoveryRequest(type_url=EDS.url, resource_names_subscribe=[ORDERS]))
    await envoy.settle()
    assert [(r.kind, r.names) for r in envoy.responses(mark)] == [(EDS, [ORDERS])]
    await envoy.settle()
    assert len(envoy.responses(mark)) == 1, "answered once"
    await envoy.close()


# -- NACKs -------------------------------------------------------------------------------


async def test_an_rds_nack_is_recorded_not_resent_and_a_later_snapshot_goes_out(protocol: str) -> None:
    config = Config()
    audit = MemoryAuditSink()
    cache, status = SnapshotCache(), ProxyStatus(audit=audit)
    start = config.snapshot("orders", "payments")
    cache.set_snapshot(start)
    envoy = await connect(protocol, cache, status)
    mark = len(envoy.received)

    error = "RE2 program size of 150 > max program size of 100 set for the error level threshold"
    envoy.nack_next[RDS] = error
    refused = config.snapshot("orders", "payments", "inventory")
    cache.set_snapshot(refused)
    await envoy.settle()

    rds = envoy.responses(mark, RDS)
    assert len(rds) == 1 and rds[0].answer == "nack"
    assert len(status.nacks) == 1
    nack = status.nacks[0]
    assert (nack.node_id, nack.group, nack.type, nack.error) == ("envoy-1", "gateway", "RDS", error)
    assert nack.version == refused.versions[RDS] == rds[0].version
    assert [r["route"] for r in nack.routes] == ["shop/inventory"]
    assert nack.routes[0]["origin"] == "git:routes/inventory.yaml:1@abc"
    [event] = audit.of_kind(CONFIG_NACKED)
    assert (event.subject, event.reason, event.details["type"], event.details["routes"]) == (
        "envoy-1", error, "RDS", "shop/inventory"
    )
    proxy = only_proxy(status)
    assert proxy.nacked["RDS"] is nack
    assert proxy.acked["RDS"] == start.versions[RDS], "the last accepted routes are what Envoy runs"
    assert envoy.versions(RDS) == snapshot_versions(start, RDS)

    # Other wake-ups (an endpoint change, a repeated snapshot) must not resend the refused routes.
    mark_after_nack = len(envoy.received)
    cache.set_snapshot(refused)
    cache.set_snapshot(
        config.snapshot("orders", "payments", "inventory", endpoints={**ENDPOINTS, "orders": ["127.0.0.1:9101"]})
    )
    await envoy.settle()
    assert envoy.types(mark_after_nack) == ["EDS"]

    fixed = config.snapshot("orders", "payments", "inventory", retired=True, endpoints={**ENDPOINTS, "orders": ["127.0.0.1:9101"]}
    )
    cache.set_snapshot(fixed)
    await envoy.settle()
    later = envoy.responses(mark_after_nack, RDS)
    assert len(later) == 1 and later[0].answer == "ack"
    assert later[0].version == fixed.versions[RDS]
    assert envoy.runs(fixed)
    assert "RDS" not in proxy.nacked, "an ACK clears the NACK shown in status"
    assert len(status.nacks) == 1, "history keeps the NACK"
    await envoy.close()


async def test_a_refused_change_reverted_clears_the_nack_and_the_waiting_push(protocol: str) -> None:
    """Back to what Envoy runs: nothing is sent (same version), and nothing is waiting any more."""
    config = Config()
    cache, status = SnapshotCache(), ProxyStatus()
    start = config.snapshot("orders", "payments")
    cache.set_snapshot(start)
    envoy = await connect(protocol, cache, status)
    proxy = only_proxy(status)
    assert proxy.unacked_since == {}, "everything ACKed"
    assert set(proxy.resources["RDS"]) == set(start.routes)

    envoy.nack_next[RDS] = "refused"
    cache.set_snapshot(config.snapshot("orders", "payments", "inventory"))
    await envoy.settle()
    assert "RDS" in proxy.nacked and "RDS" in proxy.unacked_since
    assert status.oldest_unacked("RDS") > 0

    mark = len(envoy.received)
    cache.set_snapshot(config.snapshot("orders", "payments"))  # the revert: Envoy's own routes again
    await envoy.settle()
    assert envoy.responses(mark, RDS) == [], "nothing to send"
    assert "RDS" not in proxy.nacked and "RDS" not in proxy.unacked_since
    assert status.oldest_unacked("RDS") == 0
    await envoy.close()


def with_cluster_timeout(snapshot: Snapshot, name: str, seconds: int) -> Snapshot:
    """The same config with one cluster's body changed (its references and routes unchanged)."""
    clusters = dict(snapshot.clusters)
    old = clusters[name]
    message = cluster_pb2.Cluster.FromString(old.body)
    message.connect_timeout.seconds = seconds
    clusters[name] = Resource.from_message(
        CDS, name, message, provenance=old.provenance, references=old.references
    )
    return Snapshot.build(
        clusters=clusters.values(),
        endpoints=snapshot.endpoints.values(),
        listeners=snapshot.listeners.values(),
        routes=snapshot.routes.values(),
        model=snapshot.model,
    )


async def test_a_nacked_cds_is_recorded_and_not_resent_until_the_clusters_change(protocol: str) -> None:
    config = Config()
    cache, status = SnapshotCache(), ProxyStatus()
    start = config.snapshot("orders", "payments")
    cache.set_snapshot(start)
    envoy = await connect(protocol, cache, status)
    mark = len(envoy.received)

    error = "cluster 'shop/orders:8080': connect_timeout out of range"
    envoy.nack_next[CDS] = error
    refused = with_cluster_timeout(start, ORDERS, 3600)
    cache.set_snapshot(refused)
    await envoy.settle()
    cds = envoy.responses(mark, CDS)
    assert [r.answer for r in cds] == ["nack"]
    nack = status.nacks[-1]
    assert (nack.type, nack.error, nack.version) == ("CDS", error, refused.versions[CDS])
    assert [r["route"] for r in nack.routes] == ["shop/orders"], "the cluster named in the error leads to its route"
    assert envoy.versions(CDS) == snapshot_versions(start, CDS)
    assert only_proxy(status).acked["CDS"] == start.versions[CDS]

    # An endpoint change wakes the stream: EDS goes out, the refused CDS does not.
    mark = len(envoy.received)
    cache.set_snapshot(refused.with_endpoints(config.snapshot(
        "orders", "payments", endpoints={**ENDPOINTS, "payments": ["127.0.0.1:9102"]}).endpoints.values()))
    await envoy.settle()
    assert envoy.types(mark) == ["EDS"]

    fixed = with_cluster_timeout(start, ORDERS, 5)
    cache.set_snapshot(fixed)
    await envoy.settle()
    again = envoy.responses(mark, CDS)
    assert [r.answer for r in again] == ["ack"]
    assert again[0].version == fixed.versions[CDS] != refused.versions[CDS]
    assert envoy.versions(CDS) == snapshot_versions(fixed, CDS)
    assert "CDS" not in only_proxy(status).nacked
    await envoy.close()


async def test_after_a_cds_nack_routes_to_the_refused_cluster_are_held_back(protocol: str) -> None:
    config = Config()
    cache, status = SnapshotCache(), ProxyStatus()
    start = config.snapshot("orders")
    cache.set_snapshot(start)
    envoy = await connect(protocol, cache, status)
    mark = len(envoy.received)

    envoy.nack_next[CDS] = "cluster shop/payments:8080: invalid"
    cache.set_snapshot(config.snapshot("orders", "payments"))
    await envoy.settle(quiet=0.05)  # raises the fake's violation if RDS names shop/payments:8080
    assert envoy.responses(mark, RDS) == []
    assert envoy.versions(RDS) == snapshot_versions(start, RDS)
    await envoy.close()


async def test_a_nack_is_signalled_by_error_detail_even_without_a_message() -> None:
    config = Config()
    cache, status = SnapshotCache(), ProxyStatus()
    cache.set_snapshot(config.snapshot("orders"))
    envoy = FakeEnvoy(delta=False, manual={CDS})
    envoy.start(SotwStream(cache, status, envoy.write), initial=False)
    envoy.request(CDS)
    await envoy.settle()
    cds = envoy.responses(0, CDS)
    assert len(cds) == 1
    nack = discovery_pb2.DiscoveryRequest(type_url=CDS.url, response_nonce=str(cds[0].nonce))
    nack.error_detail.code = 3  # INVALID_ARGUMENT, message left empty
    envoy.send(nack)
    await envoy.settle()
    proxy = only_proxy(status)
    assert "CDS" not in proxy.acked, "a response Envoy refused is recorded as accepted"
    assert [n.type for n in status.nacks] == ["CDS"]
    await envoy.close()


# -- flow control and nonces -------------------------------------------------------------


async def test_a_stale_nonce_is_not_an_ack_and_holds_the_next_push(protocol: str) -> None:
    config = Config()
    cache, status = SnapshotCache(), ProxyStatus()
    cache.set_snapshot(config.snapshot("orders"))
    envoy = FakeEnvoy(delta=protocol == "delta", manual={CDS})
    envoy.start(open_stream(protocol, cache, status, envoy), initial=False)
    envoy.request(CDS)
    await envoy.settle()
    assert envoy.types() == ["CDS"]
    first = envoy.received[0]

    cache.set_snapshot(config.snapshot("orders", "payments"))
    await envoy.settle()
    assert envoy.types() == ["CDS"], "a second CDS response while the first is unanswered"

    def answer(nonce: str) -> Any:
        if envoy.delta:
            return discovery_pb2.DeltaDiscoveryRequest(type_url=CDS.url, response_nonce=nonce)
        return discovery_pb2.DiscoveryRequest(type_url=CDS.url, response_nonce=nonce, version_info=first.version)

    envoy.send(answer(str(first.nonce + 1000)))
    await envoy.settle()
    assert envoy.types() == ["CDS"], "a request with an unknown nonce was taken as the ACK"
    assert only_proxy(status).acked == {}

    envoy.send(answer(str(first.nonce)))
    await envoy.settle()
    assert envoy.types() == ["CDS", "CDS"]
    second = envoy.received[1]
    assert second.nonce > first.nonce
    assert only_proxy(status).acked == {"CDS": first.version}
    if envoy.delta:
        assert second.names == [PAYMENTS]
    else:
        assert second.names == [ORDERS, PAYMENTS]
    await envoy.close()


async def test_the_fake_rejects_a_nonce_that_does_not_increase() -> None:
    """The protocol checks in the fake are themselves able to fail."""
    envoy = FakeEnvoy(delta=False)
    envoy.request(CDS)
    await envoy.write(discovery_pb2.DiscoveryResponse(type_url=CDS.url, version_info="v", nonce="5"))
    with pytest.raises(ProtocolViolation, match="does not increase"):
        await envoy.write(discovery_pb2.DiscoveryResponse(type_url=CDS.url, version_info="v", nonce="5"))
    with pytest.raises(ProtocolViolation, match="never requested"):
        await envoy.write(discovery_pb2.DiscoveryResponse(type_url=RDS.url, version_info="v", nonce="9"))


# -- delta reconnects --------------------------------------------------------------------


async def reconnect(previous: FakeEnvoy, cache: SnapshotCache, status: ProxyStatus) -> FakeEnvoy:
    """A new delta stream from an Envoy that keeps its config and tells the server about it
    (initialized: a CDS ACK waits for the clusters it rebuilds)."""
    envoy = FakeEnvoy(delta=True, node_id=previous.node_id, group=previous.group, initialized=True)
    for kind in ResourceType:
        envoy.have[kind] = dict(previous.have[kind])
        envoy.confirmed[kind] = dict(previous.have[kind])
    envoy.request(CDS, initial_versions=previous.versions(CDS))
    envoy.request(EDS, previous.have[EDS], initial_versions=previous.versions(EDS))
    envoy.request(LDS, initial_versions=previous.versions(LDS))
    envoy.request(RDS, previous.have[RDS], initial_versions=previous.versions(RDS))
    envoy.start(DeltaStream(cache, status, envoy.write), initial=False)
    await envoy.settle()
    return envoy


async def test_a_delta_reconnect_with_current_versions_resends_nothing() -> None:
    config = Config()
    cache, status = SnapshotCache(), ProxyStatus()
    snap = config.snapshot("orders", "payments")
    cache.set_snapshot(snap)
    first = await connect("delta", cache, status)
    await first.close()

    again = await reconnect(first, cache, status)
    assert [(r.kind.short, r.names, r.removed) for r in again.received if r.names or r.removed] == []
    assert again.runs(snap)

    # The seeded state is live: the next change is a delta against it.
    moved = config.snapshot("orders", "payments", endpoints={**ENDPOINTS, "orders": ["127.0.0.1:9201"]})
    cache.set_snapshot(moved)
    mark = len(again.received)
    await again.settle()
    assert [(r.kind.short, r.names) for r in again.responses(mark)] == [("EDS", [ORDERS])]
    await again.close()


async def test_a_delta_reconnect_gets_only_what_changed_while_it_was_away() -> None:
    config = Config()
    cache, status = SnapshotCache(), ProxyStatus()
    cache.set_snapshot(config.snapshot("orders", "payments"))
    first = await connect("delta", cache, status)
    await first.close()

    while_away = config.snapshot("orders", "payments", endpoints={**ENDPOINTS, "payments": ["127.0.0.1:9302"]})
    cache.set_snapshot(while_away)
    again = await reconnect(first, cache, status)
    sent = [(r.kind.short, r.names, r.removed) for r in again.received if r.names or r.removed]
    assert sent == [("EDS", [PAYMENTS], [])]
    assert again.runs(while_away)
    await again.close()


async def test_a_delta_reconnect_after_a_cluster_change_sends_its_unchanged_endpoints_again() -> None:
    """Envoy reported the endpoints as current, but rebuilds the cluster the new CDS changes."""
    config = Config()
    cache, status = SnapshotCache(), ProxyStatus()
    start = config.snapshot("orders", "payments")
    cache.set_snapshot(start)
    first = await connect("delta", cache, status)
    await first.close()

    while_away = with_cluster_timeout(start, ORDERS, 7)
    cache.set_snapshot(while_away)
    again = await reconnect(first, cache, status)
    sent = [(r.kind.short, r.names) for r in again.received if r.names or r.removed]
    assert sent == [("CDS", [ORDERS]), ("EDS", [ORDERS])]
    assert again.timed_out == [] and again.runs(while_away)
    await again.close()


# -- empty sets ----------------------------------------------------------------------------


async def test_sotw_answers_cds_with_an_empty_set_when_no_route_has_a_backend() -> None:
    config = Config()
    cache, status = SnapshotCache(), ProxyStatus()
    snap = config.snapshot(retired=True)
    assert dict(snap.clusters) == {}
    cache.set_snapshot(snap)
    envoy = await connect("sotw", cache, status)
    cds = envoy.responses(0, CDS)
    assert len(cds) == 1 and cds[0].names == []
    assert envoy.runs(snap)
    await envoy.close()


async def test_delta_answers_a_first_wildcard_cds_even_with_no_clusters() -> None:
    config = Config()
    cache, status = SnapshotCache(), ProxyStatus()
    snap = config.snapshot(retired=True)
    cache.set_snapshot(snap)
    envoy = await connect("delta", cache, status)
    assert len(envoy.responses(0, CDS)) == 1, "Envoy's cluster manager waits for this response to initialize"
    await envoy.close()


async def test_a_delta_reconnect_after_a_route_change_keeps_clusters_until_the_new_routes_are_acked() -> None:
    """The control plane restarted (or another replica answers) and routes changed meanwhile."""
    config = Config()
    cache, status = SnapshotCache(), ProxyStatus()
    cache.set_snapshot(config.snapshot("orders", "payments"))
    first = await connect("delta", cache, status)
    await first.close()

    after = config.snapshot("orders")
    cache.set_snapshot(after)
    again = await reconnect(first, cache, status)  # the fake raises if CDS drops payments too early
    assert again.runs(after)
    kinds = [r.kind.short for r in again.received if r.names or r.removed]
    assert kinds.index("RDS") < kinds.index("CDS")
    await again.close()
