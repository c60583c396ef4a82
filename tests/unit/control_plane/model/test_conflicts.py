"""Conflicting claims resolve deterministically: Git first, then the oldest, then by name."""

from __future__ import annotations

import random

from control_plane.model.conflicts import resolve_conflicts
from control_plane.model.route import Origin, Route
from control_plane.model.schema import RouteSpec


def route(name: str, *, source: str = "kubernetes", created: str = "", hosts: list[str] | None = None, path: str = "/a", namespace: str = "shop", methods: list[str] | None = None) -> Route:
    spec = RouteSpec.model_validate(
        {"hosts": hosts or [], "match": {"path": path, "methods": methods or []}, "backends": [{"service": "s", "port": 80}]}
    )
    return Route(namespace, name, spec, Origin(source, f"{namespace}/{name}", created=created))


def test_same_match_on_overlapping_hosts_conflicts_and_the_oldest_wins() -> None:
    old = route("b-old", created="2026-01-01T00:00:00Z", hosts=["api.example.com"])
    new = route("a-new", created="2026-02-01T00:00:00Z", hosts=["api.example.com", "www.example.com"])
    kept, conflicts = resolve_conflicts([new, old])
    assert kept == [old]
    assert [(c.loser, c.winner) for c in conflicts] == [(new, old)]
    assert "conflicts with shop/b-old" in conflicts[0].message


def test_git_wins_over_kubernetes_and_same_ids_conflict() -> None:
    from_git = route("orders", source="git")
    from_cluster = route("orders", created="2020-01-01T00:00:00Z", path="/other")
    kept, conflicts = resolve_conflicts([from_cluster, from_git])
    assert kept == [from_git]
    assert conflicts[0].loser is from_cluster


def test_different_hosts_methods_or_paths_do_not_conflict() -> None:
    routes = [
        route("a", hosts=["a.example.com"]),
        route("b", hosts=["b.example.com"]),
        route("c", methods=["GET"], hosts=["c.example.com"]),
        route("d", path="/d"),
    ]
    kept, conflicts = resolve_conflicts(routes)
    assert conflicts == [] and len(kept) == 4


def test_a_hostless_route_overlaps_every_host_and_resolution_is_order_independent() -> None:
    routes = [route(n, created=f"2026-01-0{i}T00:00:00Z", hosts=h) for i, (n, h) in enumerate([("x", []), ("y", ["y.example.com"]), ("z", [])], start=1)]
    expected = None
    for seed in range(20):
        shuffled = routes[:]
        random.Random(seed).shuffle(shuffled)
        kept, conflicts = resolve_conflicts(shuffled)
        outcome = ([r.name for r in kept], sorted((c.loser.name, c.winner.name) for c in conflicts))
        expected = expected or outcome
        assert outcome == expected
    assert expected == (["x"], [("y", "x"), ("z", "x")])
