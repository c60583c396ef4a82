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


def takers(found: list[Route], name: str) -> list[tuple[str, str]]:
    return [(s.why, t.id) for s, t in FallThroughs(found).variant_takers(next(r for r in found if r.name == name))]


def test_case_and_parameter_variants_reach_the_broader_public_route() -> None:
    found = routes(("admin", {"match": {"path": "/admin/**"}}),
                   ("by-id", {"match": {"path": "/orders/{id}", "methods": ["GET"]}}),
                   ("site", {"match": {"path": "/**"}, **PUBLIC}))
    assert takers(found, "admin") == [
        ("GET /ADMIN (letter case)", "shop/site"), ("GET /Admin (letter case)", "shop/site"),
        ("GET /admin;p (a ;parameter)", "shop/site"),
    ]
    assert takers(found, "by-id") == [
        ("GET /ORDERS/x (letter case)", "shop/site"), ("GET /Orders/x (letter case)", "shop/site"),
        ("GET /orders;p/x (a ;parameter)", "shop/site"),
    ]
    assert takers(found, "site") == [], "a public route has nothing to refuse"
    # The gateway refuses them (translator/variant_guard), so the route's warnings stay about methods and slashes.
    assert not any("letter case" in w or ";parameter" in w for w in warnings(found, "by-id"))


def test_no_variant_takers_without_a_public_route_behind() -> None:
    found = routes(("admin", {"match": {"path": "/admin/**"}}),
                   ("rest", {"match": {"pathPrefix": "/"}}),
                   ("digits", {"match": {"path": "/42/{id}"}}),
                   ("root", {"match": {"path": "/**"}, "hosts": ["other.example.com"], **PUBLIC}))
    assert takers(found, "admin") == [], "the variants reach `rest`, which asks for a token too"
    assert [why for why, _ in takers(found, "digits")] == [], "no letters to vary, and ;p reaches `rest`"


def test_a_template_too_complex_to_refuse_is_warned_about_instead() -> None:
    long = "/" + "/".join(["segmentnumber" + c for c in "abcdefg"]) + "/{id}"
    found = routes(("long", {"match": {"path": long}}), ("site", {"match": {"path": "/**"}, **PUBLIC}))
    assert takers(found, "long"), "its variants do reach the public route"
    warned = [w.split(" falls")[0] for w in warnings(found, "long")]
    assert any(w.endswith("(letter case)") for w in warned) and any(w.endswith("(a ;parameter)") for w in warned), warned
