"""Route custom resources: per-object quarantine and last good version."""

from __future__ import annotations

from typing import Any

from control_plane.sources.base import RouteSet
from control_plane.sources.kubernetes.routes import KubernetesRouteSource, ObjectState


def route_object(name: str, spec: dict[str, Any], *, generation: int = 1, version: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": "gatehouse.io/v1alpha1",
        "kind": "Route",
        "metadata": {
            "name": name,
            "namespace": "shop",
            "generation": generation,
            "resourceVersion": version,
            "uid": "abc",
            "creationTimestamp": "2026-12-01T00:00:00Z",
            "managedFields": [{"manager": "kubectl"}],
        },
        "spec": spec,
        "status": {"conditions": []},
    }


GOOD = {"match": {"path": "/a"}, "backends": [{"service": "svc", "port": 80}]}


def test_bad_object_is_quarantined_and_its_last_good_version_keeps_serving() -> None:
    published: list[RouteSet] = []
    states: list[ObjectState | str] = []
    source = KubernetesRouteSource(on_state=states.append)
    source.attach(published.append)
    source.apply({"shop/a": route_object("a", GOOD), "shop/b": route_object("b", {"match": {"path": "/b"}, "backends": [{"service": "svc", "port": 80}]})})
    assert sorted(r.id for r in published[-1].routes) == ["shop/a", "shop/b"]
    first_a = next(r for r in published[-1].routes if r.id == "shop/a")
    assert first_a.origin.source == "kubernetes" and first_a.origin.location == "shop/a"
    assert first_a.origin.created == "2026-12-01T00:00:00Z"

    bad = route_object("a", {"match": {"path": "/a"}, "backends": [{"service": "svc", "port": 80, "weight": 0}]}, generation=2, version="2")
    source.apply({"shop/a": bad})
    state = source.states()["shop/a"]
    assert not state.accepted and state.reason == "Invalid" and state.generation == 2
    assert "at least one backend needs a weight above 0" in state.message
    assert "generation 1 keeps serving" in state.message
    assert next(r for r in published[-1].routes if r.id == "shop/a") is first_a
    assert source.states()["shop/b"].accepted

    source.apply({"shop/a": None})
    assert [r.id for r in published[-1].routes] == ["shop/b"]
    assert states[-1] == "shop/a"


def test_a_new_invalid_object_serves_nothing_and_metadata_only_updates_publish_nothing() -> None:
    published: list[RouteSet] = []
    source = KubernetesRouteSource()
    source.attach(published.append)
    source.apply({"shop/x": route_object("x", {"match": {"path": "/x", "pathPrefix": "/y"}, "backends": []})})
    assert published[-1].routes == ()
    assert source.states()["shop/x"].serving is None

    source.apply({"shop/a": route_object("a", GOOD)})
    count = len(published)
    # Our own status write: new resourceVersion, same generation.
    source.apply({"shop/a": route_object("a", GOOD, version="7")})
    assert len(published) == count
