"""Snapshot.inconsistencies(): what would leave Envoy waiting or routing nowhere, found
before the snapshot is published (as go-control-plane's Snapshot.Consistent())."""

from __future__ import annotations

from typing import Any

import pytest

from control_plane.cache.resource import Resource
from control_plane.cache.snapshot import Snapshot
from control_plane.cache.types import ResourceType


def resource(kind: ResourceType, name: str, *references: str) -> Resource:
    return Resource.from_bytes(kind, name, name.encode(), references=references)


CLUSTER = resource(ResourceType.CLUSTER, "shop/orders:80", "shop/orders:80")
ASSIGNMENT = resource(ResourceType.ENDPOINT, "shop/orders:80")
ROUTES = resource(ResourceType.ROUTE, "gatehouse_http", "shop/orders:80")
LISTENER = resource(ResourceType.LISTENER, "gatehouse_http", "gatehouse_http")
TLS_LISTENER = resource(ResourceType.LISTENER, "gatehouse_http", "gatehouse_http", "gatehouse-tls")
SECRET = resource(ResourceType.SECRET, "gatehouse-tls")
CONSISTENT: dict[str, Any] = {"clusters": [CLUSTER], "endpoints": [ASSIGNMENT], "listeners": [LISTENER], "routes": [ROUTES]}


def problems(**changes: Any) -> list[str]:
    return Snapshot.build(**{**CONSISTENT, **changes}).inconsistencies()


def test_a_consistent_snapshot_has_no_problems() -> None:
    assert problems() == []
    assert problems(listeners=[TLS_LISTENER], secrets=[SECRET]) == []
    assert Snapshot.build(clusters=(), endpoints=(), listeners=(), routes=()).inconsistencies() == []


@pytest.mark.parametrize(
    "changes, expected",
    [
        pytest.param({"endpoints": []}, ["cluster shop/orders:80 has no endpoint assignment"], id="an EDS cluster without its set"),
        pytest.param(
            {"endpoints": [ASSIGNMENT, resource(ResourceType.ENDPOINT, "shop/gone:80")]},
            ["endpoint assignment shop/gone:80 names no cluster"],
            id="an EDS set no cluster names",
        ),
        pytest.param(
            {"routes": [resource(ResourceType.ROUTE, "gatehouse_http", "shop/orders:80", "shop/missing:80")]},
            ["route config gatehouse_http points at missing cluster shop/missing:80"],
            id="a route to a missing cluster",
        ),
        pytest.param(
            {"routes": [ROUTES, resource(ResourceType.ROUTE, "orphan")]},
            ["route config orphan is named by no listener"],
            id="an RDS no listener names",
        ),
        pytest.param(
            {"listeners": [], "clusters": [CLUSTER]},
            ["route config gatehouse_http is named by no listener"],
            id="routes without a listener",
        ),
        pytest.param(
            {"routes": []},
            ["listener gatehouse_http points at missing route config or secret gatehouse_http"],
            id="a listener without its route config",
        ),
        pytest.param(
            {"listeners": [TLS_LISTENER]},
            ["listener gatehouse_http points at missing route config or secret gatehouse-tls"],
            id="a TLS listener without its secret",
        ),
    ],
)
def test_each_broken_link_is_named(changes: dict[str, Any], expected: list[str]) -> None:
    assert problems(**changes) == expected


def test_every_problem_is_reported_at_once() -> None:
    found = problems(endpoints=[resource(ResourceType.ENDPOINT, "shop/gone:80")], listeners=[])
    assert found == [
        "cluster shop/orders:80 has no endpoint assignment",
        "endpoint assignment shop/gone:80 names no cluster",
        "route config gatehouse_http is named by no listener",
    ]
