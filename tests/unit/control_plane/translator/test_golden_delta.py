"""golden_delta: a delta always gives its value back, so a delta golden pins the whole output."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.control_plane.translator.golden_delta import delta, expand

SHARED = [{
    "name": "gatehouse_http",
    "address": {"socket_address": {"address": "0.0.0.0", "port_value": 8080}},
    "filter_chains": [{"filters": [{"name": "hcm", "typed_config": {
        "stat_prefix": "gatehouse",
        "http_filters": [{"name": "a", "typed_config": {"x": 1}}, {"name": "b", "disabled": True}, {"name": "router"}],
        "server_name": "gatehouse",
        "normalize_path": True,
        "local_reply_config": {"mappers": [{"status_code": 404, "body": "not_found"}, {"status_code": 503, "body": "overloaded"}]},
    }}]}],
}]
"""A listener like the translator's, small: a delta pays off where most of it is shared."""


def strict(value: Any) -> str:
    """The value as JSON, keys sorted: 1, 1.0 and true differ, dict order does not."""
    return json.dumps(value, sort_keys=True)


def changed(**hcm: Any) -> list[dict[str, Any]]:
    listener = json.loads(json.dumps(SHARED))
    listener[0]["filter_chains"][0]["filters"][0]["typed_config"].update(hcm)
    return listener  # type: ignore[no-any-return]


def test_the_shared_listener_is_one_line() -> None:
    assert delta(SHARED, SHARED) == [{"$shared": "gatehouse_http"}]


def test_a_new_filter_is_written_in_full_among_references_to_the_others() -> None:
    filters = SHARED[0]["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"]  # type: ignore[index]
    actual = changed(http_filters=[filters[0], {"name": "new", "typed_config": {"y": 2}}, *filters[1:]])
    written = delta(actual, SHARED)
    hcm = written[0]["filter_chains"][0]["filters"][0]["typed_config"]
    assert hcm == {"http_filters": [{"$shared": "a"}, {"name": "new", "typed_config": {"y": 2}}, {"$shared": "b"}, {"$shared": "router"}]}
    assert written[0]["filter_chains"][0]["$shared"] == 0
    assert expand(written, SHARED) == actual


def test_a_changed_filter_shows_only_its_change_and_a_removed_field_is_named() -> None:
    filters = SHARED[0]["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"]  # type: ignore[index]
    actual = changed(http_filters=[{"name": "a", "typed_config": {"x": 2}}, *filters[1:]])
    del actual[0]["filter_chains"][0]["filters"][0]["typed_config"]["server_name"]
    hcm = delta(actual, SHARED)[0]["filter_chains"][0]["filters"][0]["typed_config"]
    assert hcm["http_filters"][0] == {"$shared": "a", "typed_config": {"x": 2}}
    assert hcm["$removed"] == ["server_name"]
    assert strict(expand(delta(actual, SHARED), SHARED)) == strict(actual)


def test_types_count_a_true_is_not_a_one() -> None:
    assert delta({"k": True}, {"k": 1}) == {"k": True}
    assert delta({"k": 1}, {"k": True}) == {"k": 1}
    assert delta({"k": 1.0}, {"k": 1}) == {"k": 1.0}


def test_output_with_a_marker_key_is_refused() -> None:
    with pytest.raises(ValueError, match=r"\$shared"):
        delta([{"name": "x", "$shared": "y"}], SHARED)


# --- the property: expand(delta(a, b), b) == a for any JSON a and b --------------------------

KEYS = st.sampled_from(["name", "a", "b", "c", "typed_config", "disabled"])
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.floats(-2, 2, allow_nan=False, allow_infinity=False),
    st.sampled_from(["x", "y", "gatehouse", "$shared", "0"]),
)


def named_lists(children: st.SearchStrategy[Any]) -> st.SearchStrategy[list[dict[str, Any]]]:
    """Lists of dicts with a name: filters, listeners; names often repeat between two draws."""
    item = st.builds(lambda name, rest: {"name": name, **rest}, st.sampled_from(["f", "g", "h", "i"]),
                     st.dictionaries(KEYS.filter(lambda k: k != "name"), children, max_size=3))
    return st.lists(item, max_size=4)


JSON = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=4) | named_lists(children),
    max_leaves=25,
)


@st.composite
def mutated(draw: st.DrawFn, value: Any) -> Any:
    """``value`` with some parts changed, dropped, added or moved: a case beside the shared one."""
    choice = draw(st.integers(0, 5))
    if choice == 0:
        return draw(JSON)
    if isinstance(value, dict):
        out = {k: draw(mutated(v)) for k, v in value.items() if draw(st.integers(0, 4))}
        out.update(draw(st.dictionaries(KEYS, JSON, max_size=1)))
        return out
    if isinstance(value, list):
        items: list[Any] = [draw(mutated(v)) for v in value if draw(st.integers(0, 4))]
        insert: bool = draw(st.booleans())
        if items and insert:
            items.insert(draw(st.integers(0, len(items))), draw(JSON))
        return draw(st.permutations(items)) if draw(st.integers(0, 4)) == 0 else items
    return value


@settings(max_examples=400, deadline=None)
@given(st.data(), JSON)
def test_a_delta_gives_its_value_back(data: st.DataObject, shared: Any) -> None:
    actual = data.draw(mutated(shared)) if data.draw(st.booleans()) else data.draw(JSON)
    written = delta(actual, shared)
    assert strict(expand(written, shared)) == strict(actual)

