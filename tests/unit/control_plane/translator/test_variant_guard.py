"""Letter-case and ';' spellings of a protected path that reach a public route: refused (variant_guard)."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format

from control_plane.translator import RouteTranslator
from control_plane.translator.messages import RouteConfiguration
from control_plane.translator.variant_guard import CODE, variant_guards
from tests.unit.control_plane.model.test_fall_through import PUBLIC, routes
from tests.unit.control_plane.translator.test_accepted_routes import ENFORCING


def any_host_entries(found: list[Any]) -> list[dict[str, Any]]:
    config = RouteConfiguration()
    config.ParseFromString(RouteTranslator(ENFORCING).translate(found).routes[0].body)
    (vhost,) = [v for v in config.virtual_hosts if v.name == "any"]
    return [json_format.MessageToDict(e, preserving_proto_field_name=True) for e in vhost.routes]


def test_guards_follow_the_protected_route_and_answer_400() -> None:
    found = routes(("admin", {"match": {"path": "/admin/**", "methods": ["GET"]}}),
                   ("by-id", {"match": {"path": "/orders/{id}"}}),
                   ("site", {"match": {"path": "/**"}, **PUBLIC}))
    entries = any_host_entries(found)
    shape = [(e["name"], "direct_response" in e, {k: v for k, v in e["match"].items() if k != "headers"}) for e in entries]
    assert shape == [
        ("shop/by-id", False, {"path_match_policy": entries[0]["match"]["path_match_policy"]}),
        ("shop/by-id", True, {"safe_regex": {"regex": "(?i)/orders(?:;[^/]*)?/[^/]+"}}),
        ("shop/admin", False, {"path_separated_prefix": "/admin"}),
        ("shop/admin", True, {"path_separated_prefix": "/admin", "case_sensitive": False}),
        ("shop/admin", True, {"prefix": "/admin;", "case_sensitive": False}),
        ("shop/site", False, {"prefix": "/"}),
    ]
    guard = entries[3]
    assert guard["match"]["headers"] == entries[2]["match"]["headers"], "the route's own method condition"
    assert guard["direct_response"]["status"] == 400
    assert guard["direct_response"]["body_format"]["json_format"]["error"]["code"] == CODE
    assert guard["typed_per_filter_config"]["envoy.filters.http.ext_authz"]["disabled"] is True


def test_tables_without_a_public_fall_through_are_unchanged() -> None:
    """No public route, only protected ones, or a public route the variants do not reach: no guard entries."""
    protected = routes(("admin", {"match": {"path": "/admin/**"}}), ("rest", {"match": {"pathPrefix": "/"}}))
    assert variant_guards(protected, protected, ENFORCING) == {}
    elsewhere = routes(("admin", {"match": {"path": "/admin/**"}}), ("docs", {"match": {"path": "/docs/**"}, **PUBLIC}))
    assert variant_guards(elsewhere, elsewhere, ENFORCING) == {}
    assert [e["name"] for e in any_host_entries(elsewhere)] == ["shop/admin", "shop/docs"]
    regex = routes(("re", {"match": {"pathRegex": "/admin/.*"}}), ("site", {"match": {"path": "/**"}, **PUBLIC}))
    assert variant_guards(regex, regex, ENFORCING) == {}, "a regex route has no path to vary"
