"""ReferenceGrant objects → the grants the pipeline reads, and a Route's ResolvedRefs status."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes.client import ApiClient

from control_plane.cache.snapshot_cache import SnapshotCache
from control_plane.model.references import Unresolved, permitted_routes
from control_plane.model.route import Origin, Route
from control_plane.model.schema import RouteSpec
from control_plane.snapshots import SnapshotPublisher
from control_plane.sources.base import RouteSet
from control_plane.sources.kubernetes.reference_grants import SOURCE, KubernetesReferenceGrants
from control_plane.sources.kubernetes.routes import KubernetesRouteSource
from control_plane.sources.kubernetes.source import KubernetesSettings, KubernetesSource
from control_plane.sources.kubernetes.status import Condition, StatusWriter
from control_plane.sources.static_endpoints import StaticEndpointTable
from control_plane.translator import GatewaySettings, RouteTranslator


def grant_object(name: str, namespace: str, from_namespace: str, service: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1beta1",
        "kind": "ReferenceGrant",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": "7", "uid": "u", "managedFields": [{"manager": "kubectl"}]},
        "spec": {
            "from": [{"group": "gatehouse.io", "kind": "Route", "namespace": from_namespace}],
            "to": [{"group": "", "kind": "Service", **({"name": service} if service else {})}],
        },
    }


def route_object(name: str, namespace: str, backend: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "gatehouse.io/v1alpha1",
        "kind": "Route",
        "metadata": {"name": name, "namespace": namespace, "generation": 1, "resourceVersion": "1", "creationTimestamp": "2026-12-01T00:00:00Z"},
        "spec": {"match": {"pathPrefix": f"/{name}"}, "backends": [backend], "auth": {"required": False}},
    }


def test_grants_are_published_as_a_set_of_their_own_that_counts_for_every_source() -> None:
    published: list[RouteSet] = []
    grants = KubernetesReferenceGrants()
    grants.attach(published.append)
    grants.apply({"shop/b": grant_object("b", "shop", "evil", "orders"), "shop/a": grant_object("a", "shop", "other")})
    [first] = published
    assert (first.source, first.routes) == (SOURCE, ())
    assert [g.id for g in first.grants] == ["shop/a", "shop/b"] and all(g.cluster for g in first.grants)
    assert first.grants[1].origin.location == "shop/b" and first.grants[1].targets[0].name == "orders"

    broken = grant_object("c", "shop", "evil")
    broken["spec"]["from"][0]["namespace"] = "*"
    grants.apply({"shop/a": None, "shop/c": broken})
    assert [g.id for g in published[-1].grants] == ["shop/b"], "deleted and refused grants grant nothing"
    assert grants.status() == {
        "installed": True,
        "grants": 1,
        "invalid": {"shop/c": "spec.from[0].namespace: '*': a ReferenceGrant names one namespace; there are no wildcards"},
    }


def resolved_refs(writer: StatusWriter, key: str) -> dict[str, Condition]:
    desired = writer.get(key)
    assert desired is not None
    return {c.type: c for c in desired.conditions}


def test_a_route_without_its_grant_is_resolved_refs_false_not_serving_and_pending_once_granted() -> None:
    source = KubernetesSource(KubernetesSettings(kubeconfig="unused"))
    writer = source._writer = StatusWriter(ApiClient())
    published: list[RouteSet] = []
    source.routes.attach(published.append)
    source.reference_grants.attach(published.append)
    source.routes.apply({
        "evil/steal": route_object("steal", "evil", {"service": "orders", "port": 8080, "namespace": "shop"}),
        "evil/own": route_object("own", "evil", {"service": "local", "port": 8080}),
    })  # fmt: skip
    _, unresolved = permitted_routes(published)
    source.report_unresolved(unresolved)
    steal = resolved_refs(writer, "evil/steal")
    assert (steal["ResolvedRefs"].status, steal["ResolvedRefs"].reason) == ("False", "RefNotPermitted")
    assert "spec.backends[0]: Service shop/orders" in steal["ResolvedRefs"].message and "namespace: evil" in steal["ResolvedRefs"].message
    assert (steal["Programmed"].status, steal["Programmed"].reason) == ("False", "NotServing")
    assert steal["Accepted"].status == "True", "the route is valid; only its reference is not permitted"
    assert resolved_refs(writer, "evil/own")["ResolvedRefs"].status == "True"
    assert source.status()["unresolved"] == {"evil/steal": unresolved[0].message}

    source.reference_grants.apply({"shop/g": grant_object("g", "shop", "evil", "orders")})
    _, unresolved = permitted_routes(published)
    assert unresolved == []
    source.report_unresolved(unresolved)
    steal = resolved_refs(writer, "evil/steal")
    assert steal["ResolvedRefs"].status == "True"
    assert steal["Programmed"].reason == "Pending", "served again only once Envoy ACKs the configuration holding it"
    assert source.status()["unresolved"] is None and source.status()["reference_grants"]["grants"] == 1


def test_routes_of_other_sources_are_not_written_on() -> None:
    source = KubernetesSource(KubernetesSettings(kubeconfig="unused"))
    writer = source._writer = StatusWriter(ApiClient())
    spec = RouteSpec.model_validate({"match": {"pathPrefix": "/steal"}, "backends": [{"service": "orders", "port": 8080, "namespace": "shop"}]})
    from_git = Route("evil", "steal", spec, Origin("git", "routes/steal.yaml"))
    [left_out] = permitted_routes([RouteSet("routes", "c1", (from_git,))])[1]
    source.report_unresolved([left_out])
    assert writer.get("evil/steal") is None and source.status()["unresolved"] is None


async def test_the_publisher_leaves_out_unresolved_routes_and_serves_them_once_granted() -> None:
    """One place decides, over every source's routes, before conflicts and translation."""
    heard: list[list[str]] = []

    class Feedback:
        def report_conflicts(self, conflicts: object) -> None: ...
        def report_unresolved(self, unresolved: list[Unresolved]) -> None:
            heard.append([u.route.id for u in unresolved])
        def report_problems(self, problems: object) -> None: ...
        def acked(self, kind: object, snapshot: object) -> None: ...
        def nacked(self, kind: object, routes: object, error: str) -> None: ...

    cache = SnapshotCache()
    publisher = SnapshotPublisher(cache, RouteTranslator(GatewaySettings()), edges={}, feedback=[Feedback()], quiet=0.001, max_delay=0.01)
    routes = KubernetesRouteSource()
    routes.attach(publisher.publish_routes)
    grants = KubernetesReferenceGrants()
    grants.attach(publisher.publish_routes)
    task = asyncio.create_task(publisher.run())

    async def until(wanted: set[str]) -> None:
        for _ in range(400):
            await asyncio.sleep(0.005)
            snapshot = cache.current("*")
            if snapshot is not None and {r.id for r in snapshot.model} == wanted:
                return
        snapshot = cache.current("*")
        raise AssertionError(f"served {sorted(r.id for r in snapshot.model) if snapshot else None}, wanted {sorted(wanted)}")

    try:
        routes.apply({
            "evil/steal": route_object("steal", "evil", {"service": "orders", "port": 8080, "namespace": "shop"}),
            "evil/own": route_object("own", "evil", {"service": "local", "port": 8080}),
        })  # fmt: skip
        grants.apply({})
        publisher.endpoint_publisher(0)(StaticEndpointTable({}), 0.0)
        publisher.open()
        await until({"evil/own"})
        assert [u.route.id for u in publisher.unresolved] == ["evil/steal"] and heard[-1] == ["evil/steal"]
        grants.apply({"shop/g": grant_object("g", "shop", "evil")})
        await until({"evil/own", "evil/steal"})
        assert publisher.unresolved == [] and heard[-1] == []
        grants.apply({"shop/g": None})
        await until({"evil/own"})
        assert heard[-1] == ["evil/steal"]
    finally:
        task.cancel()
