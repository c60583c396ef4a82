"""Which requests an authenticated route does not take reach a public route (fall_through)."""

from __future__ import annotations

from typing import Any

import yaml

from control_plane.model import Origin, Route, parse_route_file
from control_plane.model.fall_through import FallThroughs


def routes(*docs: tuple[str, dict[str, Any]]) -> list[Route]:
    text = yaml.safe_dump_all(
        [{"apiVersion": "gatehouse.io/v1alpha1", "kind": "Route", "metadata": {"name": name, "namespace": "shop"},
          "spec": {"backends": [{"service": "s", "port": 80}], **spec}} for name, spec in docs]
    )
    found, problems = parse_route_file(text, Origin("file", "r.yaml"))
    assert problems == [], [str(p) for p in problems]
    return found


def warnings(found: list[Route], name: str) -> list[str]:
    return FallThroughs(found).of(next(r for r in found if r.name == name))


PUBLIC = {"auth": {"required": False}}


def test_other_methods_and_a_trailing_slash_reach_the_broader_public_route() -> None:
    found = routes(("by-id", {"match": {"path": "/orders/{id}", "methods": ["GET"]}}),
                   ("legacy", {"match": {"path": "/orders/**"}, **PUBLIC}))
    assert warnings(found, "by-id") == [
        "POST /orders/x (a method the route does not take) falls through to the public route shop/legacy, which serves "
        "it with no token checked; set match.otherMethods: reject to answer 405",
        "GET /orders/x/ (a trailing slash) falls through to the public route shop/legacy, which serves it with no token checked",
    ]
    assert warnings(found, "legacy") == [], "a public route is not warned about"


def test_no_warning_when_another_authenticated_route_takes_it_first() -> None:
    found = routes(("read", {"match": {"path": "/orders/{id}", "methods": ["GET"]}}),
                   ("write", {"match": {"path": "/orders/{id}"}}),
                   ("slash", {"match": {"pathPrefix": "/orders/"}}),
                   ("legacy", {"match": {"pathPrefix": "/"}, **PUBLIC}))
    assert warnings(found, "read") == [], "POST goes to `write`, the slash to `slash`: both ask for a token"


def test_reject_closes_the_method_case_and_a_glob_has_no_slash_case() -> None:
    found = routes(("by-id", {"match": {"path": "/orders/{id}", "methods": ["GET"], "otherMethods": "reject"}}),
                   ("tree", {"match": {"path": "/reports/**", "methods": ["GET"], "otherMethods": "reject"}}),
                   ("any", {"match": {"pathPrefix": "/"}, **PUBLIC}))
    assert [w.split(" falls")[0] for w in warnings(found, "by-id")] == ["GET /orders/x/ (a trailing slash)"]
    assert warnings(found, "tree") == []


def test_hosts_are_honoured() -> None:
    found = routes(("secure", {"hosts": ["api.example.com"], "match": {"path": "/a", "methods": ["GET"]}}),
                   ("elsewhere", {"hosts": ["www.example.com"], "match": {"pathPrefix": "/"}, **PUBLIC}),
                   ("wild", {"hosts": ["*.example.com"], "match": {"pathPrefix": "/a"}, **PUBLIC}))
    taken = warnings(found, "secure")
    assert taken and all("shop/wild" in w for w in taken), "the wildcard covers api.example.com; www does not"


def test_regex_routes_are_matched_as_re2_reads_them() -> None:
    found = routes(("csv", {"match": {"path": "/reports/q3", "methods": ["GET"]}}),
                   ("re", {"match": {"pathRegex": "/reports/[a-z0-9]+/?"}, **PUBLIC}))
    assert [w.split(" falls")[0] for w in warnings(found, "csv")] == [
        "POST /reports/q3 (a method the route does not take)", "GET /reports/q3/ (a trailing slash)",
    ]
