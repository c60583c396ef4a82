"""Spellings of a route's path that Envoy does not match but an upstream may read as it."""

from __future__ import annotations

import re

import re2
from hypothesis import given, settings
from hypothesis import strategies as st

from control_plane.model import Route
from control_plane.model.fall_through import _Matcher, _variant_samples
from control_plane.model.path_variants import PARAMETER, literal_prefixes, sample_paths, segments, template_regex
from control_plane.model.paths import PathKind
from tests.unit.control_plane.model.test_fall_through import routes


def one(match: dict[str, object]) -> Route:
    return routes(("r", {"match": match}))[0]


def test_literal_prefixes_stop_at_the_first_variable() -> None:
    assert literal_prefixes(one({"path": "/api/v2/orders/{id}/items"})) == ["/api", "/api/v2", "/api/v2/orders"]
    assert literal_prefixes(one({"path": "/admin/**"})) == ["/admin"]
    assert literal_prefixes(one({"pathPrefix": "/admin/"})) == ["/admin"]
    assert literal_prefixes(one({"path": "/**"})) == [] and literal_prefixes(one({"path": "/"})) == []
    assert segments(one({"pathRegex": "/a/.*"})) is None, "a regex has no one path to vary"


def test_template_regex_takes_case_and_parameters_on_every_literal_segment() -> None:
    regex = template_regex(one({"path": "/orders/{id}/items"}))
    assert regex == "(?i)/orders(?:;[^/]*)?/[^/]+/items(?:;[^/]*)?"
    for path in ("/Orders/1/ITEMS", "/orders;x/1/items", "/orders/1/items;jsessionid=2", "/orders/1;v/items"):
        assert re2.fullmatch(regex, path), path
    for path in ("/orders/1", "/orders/1/items/2", "/ordersx/1/items", "/orders//items"):
        assert not re2.fullmatch(regex, path), path
    assert template_regex(one({"path": "/orders/**"})) is None, "not a template: no regex needed"
    glob = template_regex(one({"path": "/users/{id}/**"}))
    assert glob is not None and re2.fullmatch(glob, "/USERS/1") and re2.fullmatch(glob, "/users;a/1/x/y")


def test_samples_vary_case_and_add_a_parameter() -> None:
    assert sample_paths(one({"path": "/v2/{id}"})) == [
        ("/V2/x", "letter case"), ("/V2/x", "letter case"), ("/v2;p/x", "a ;parameter")]
    assert sample_paths(one({"path": "/42/{id}"})) == [("/42;p/x", "a ;parameter")], "digits have no case"
    assert sample_paths(one({"path": "/{id}"})) == [] and sample_paths(one({"pathRegex": "/a"})) == []


_LITERAL = st.text(alphabet="abcXYZ09-._~;%", min_size=1, max_size=8).filter(lambda s: not s.startswith("%") or len(s) > 2)
_SEGMENT = st.one_of(_LITERAL, _LITERAL, st.sampled_from(["{id}", "{name}"]))


@st.composite
def route_paths(draw: st.DrawFn) -> dict[str, object]:
    parts = draw(st.lists(_SEGMENT, min_size=1, max_size=5, unique=True))
    kind = draw(st.sampled_from(["path", "glob", "prefix"]))
    if kind == "prefix":
        return {"pathPrefix": "/" + "/".join(p for p in parts if not p.startswith("{")) + draw(st.sampled_from(["", "/"]))}
    text = "/" + "/".join(parts)
    return {"path": text + ("/**" if kind == "glob" else "")}


def _guard_takes(route: Route, path: str) -> bool:
    """What translator/variant_guard's entries take, read as Envoy does."""
    regex = template_regex(route)
    if regex is not None:
        return re2.fullmatch(regex, path) is not None
    folded = path.lower()
    if any(folded.startswith(p.lower() + PARAMETER) for p in literal_prefixes(route)):
        return True
    pattern = route.path
    if pattern is not None and pattern.kind is PathKind.EXACT:
        return folded == pattern.text.lower()
    base = (pattern.literal_prefix if pattern is not None else route.spec.match.path_prefix) or ""
    if pattern is not None:
        return folded == base.lower() or folded.startswith(base.lower() + "/")
    return folded.startswith(base.lower())


@settings(max_examples=300, deadline=None)
@given(route_paths())
def test_every_sample_is_a_variant_the_route_misses_and_its_guard_takes(match: dict[str, object]) -> None:
    """Property: for any route path, no crash; each sample is not taken by the route itself
    (Envoy would pass it on) and is taken by its guard (the gateway refuses it)."""
    try:
        route = one(match)
    except AssertionError:
        return  # a path the schema refuses (with its own error, tested elsewhere)
    matcher = _Matcher(route)
    literal_prefixes(route)
    for sample in _variant_samples(route):
        path, why = sample.path, sample.why
        assert not matcher.takes(path), (match, path, why)
        if route.path is None or route.path.kind is not PathKind.TEMPLATE or template_regex(route) is not None:
            assert _guard_takes(route, path), (match, path, why)
        assert re.fullmatch(r"/[^?#]*", path), path
