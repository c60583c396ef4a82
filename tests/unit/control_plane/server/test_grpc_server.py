"""One real grpc.aio round trip through ``build_server``: SotW, then delta, on loopback."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable

import grpc
import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2

from control_plane.cache import ResourceType, Snapshot, SnapshotCache, content_hash
from control_plane.model import Origin, parse_route_file
from control_plane.proxy_status import ProxyStatus
from control_plane.server.ads import build_server
from control_plane.sources.static_endpoints import parse_endpoints
from control_plane.translator import EndpointTranslator, GatewaySettings, RouteTranslator

CDS, LDS = ResourceType.CLUSTER, ResourceType.LISTENER
NODE = base_pb2.Node(id="envoy-grpc", cluster="gateway")
TIMEOUT = 5

ROUTES = """\
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: orders, namespace: shop}
spec:
  auth: {required: false}
  match: {pathPrefix: /orders}
  backends: [{service: svc, port: 8080}]
---
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: payments, namespace: shop}
spec:
  auth: {required: false}
  match: {pathPrefix: /payments}
  backends: [{service: payments, port: 9090}]
"""


def build_snapshot(text: str) -> Snapshot:
    routes, problems = parse_route_file(text, Origin("git", "r.yaml", "abc"))
    assert not problems
    translation = RouteTranslator(GatewaySettings()).translate(routes)
    table = parse_endpoints(b"services: {svc: ['127.0.0.1:9000'], payments: ['127.0.0.1:9001']}", "x")
    return Snapshot.build(
        clusters=translation.clusters,
        endpoints=EndpointTranslator().translate(translation.cluster_refs, table),
        listeners=translation.listeners,
        routes=translation.routes,
        model=translation.model,
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def eventually(check: Callable[[], bool], what: str) -> None:
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
async def served() -> AsyncIterator[tuple[SnapshotCache, ProxyStatus, ads_pb2_grpc.AggregatedDiscoveryServiceStub]]:
    cache, status = SnapshotCache(), ProxyStatus()
    port = free_port()
    server = build_server(cache, status, f"127.0.0.1:{port}")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield cache, status, ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel)
    finally:
        await channel.close()
        await server.stop(None)


async def test_sotw_cds_and_lds_round_trip_over_grpc(
    served: tuple[SnapshotCache, ProxyStatus, ads_pb2_grpc.AggregatedDiscoveryServiceStub],
) -> None:
    cache, status, stub = served
    snap = build_snapshot(ROUTES)
    cache.set_snapshot(snap)

    call = stub.StreamAggregatedResources()
    await call.write(discovery_pb2.DiscoveryRequest(node=NODE, type_url=CDS.url))
    cds = await asyncio.wait_for(call.read(), TIMEOUT)
    assert cds.type_url == CDS.url
    assert cds.version_info == snap.versions[CDS]
    assert cds.nonce == "1"
    clusters = {}
    for packed in cds.resources:
        assert packed.type_url == CDS.url
        cluster = cluster_pb2.Cluster()
        assert packed.Unpack(cluster)
        clusters[cluster.name] = content_hash(packed.value)
    assert clusters == {name: r.version for name, r in snap.clusters.items()}
    assert set(clusters) == {"shop/svc:8080", "shop/payments:9090"}

    await call.write(
        discovery_pb2.DiscoveryRequest(type_url=CDS.url, version_info=cds.version_info, response_nonce=cds.nonce)
    )
    await call.write(discovery_pb2.DiscoveryRequest(type_url=LDS.url))
    lds = await asyncio.wait_for(call.read(), TIMEOUT)
    assert lds.type_url == LDS.url and int(lds.nonce) > int(cds.nonce)
    assert lds.version_info == snap.versions[LDS]
    assert [a.value for a in lds.resources] == [r.body for r in snap.listeners.values()]

    def proxy_acked() -> dict[str, str]:
        proxies = list(status.proxies.values())
        return proxies[0].acked if proxies else {}

    await eventually(lambda: proxy_acked() == {"CDS": snap.versions[CDS]}, "the CDS ACK in status")
    proxy = next(iter(status.proxies.values()))
    assert (proxy.node_id, proxy.group, proxy.protocol) == ("envoy-grpc", "gateway", "sotw")

    await call.done_writing()
    assert await asyncio.wait_for(call.read(), TIMEOUT) == grpc.aio.EOF
    assert await call.code() == grpc.StatusCode.OK
    await eventually(lambda: status.proxies == {}, "the disconnect in status")


async def test_delta_round_trip_with_a_server_initiated_push_over_grpc(
    served: tuple[SnapshotCache, ProxyStatus, ads_pb2_grpc.AggregatedDiscoveryServiceStub],
) -> None:
    cache, status, stub = served
    snap = build_snapshot(ROUTES)
    cache.set_snapshot(snap)

    call = stub.DeltaAggregatedResources()
    await call.write(discovery_pb2.DeltaDiscoveryRequest(node=NODE, type_url=CDS.url))
    first = await asyncio.wait_for(call.read(), TIMEOUT)
    assert first.type_url == CDS.url
    assert first.system_version_info == snap.versions[CDS]
    assert {r.name: r.version for r in first.resources} == {n: r.version for n, r in snap.clusters.items()}
    assert all(r.resource.type_url == CDS.url for r in first.resources)
    assert list(first.removed_resources) == []
    await call.write(discovery_pb2.DeltaDiscoveryRequest(type_url=CDS.url, response_nonce=first.nonce))
    await eventually(
        lambda: any(p.acked.get("CDS") == snap.versions[CDS] for p in status.proxies.values()), "the delta ACK"
    )

    # Drop the payments route: the server pushes on its own, and only the removal travels.
    only_orders = build_snapshot(ROUTES.split("---\n")[0])
    cache.set_snapshot(only_orders)
    second = await asyncio.wait_for(call.read(), TIMEOUT)
    assert second.type_url == CDS.url and int(second.nonce) > int(first.nonce)
    assert list(second.resources) == []
    assert list(second.removed_resources) == ["shop/payments:9090"]
    assert second.system_version_info == only_orders.versions[CDS]
    assert next(iter(status.proxies.values())).protocol == "delta"

    await call.done_writing()
    assert await asyncio.wait_for(call.read(), TIMEOUT) == grpc.aio.EOF
    assert await call.code() == grpc.StatusCode.OK


async def test_build_server_listens_on_a_kernel_chosen_port() -> None:
    server = build_server(SnapshotCache(), ProxyStatus(), "127.0.0.1:0")
    assert isinstance(server, grpc.aio.Server)
    await server.start()
    await server.stop(None)


async def test_build_server_reports_a_taken_address_as_oserror_naming_it() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        with pytest.raises(OSError, match=address):
            build_server(SnapshotCache(), ProxyStatus(), address)
