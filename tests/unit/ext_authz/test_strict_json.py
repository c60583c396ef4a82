"""ext_authz/check/strict_json.py by property: what it accepts it reads as json.loads does, it
refuses exactly the bodies nested deeper than MAX_DEPTH (its bracket count agrees with a
walk of the document), and no bytes make it raise anything but BodyRefused."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ext_authz.check import strict_json as strict_json
from ext_authz.check.strict_json import MAX_DEPTH, BodyRefused

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Keys and strings with the characters that matter to the depth count: quotes, backslashes, brackets.
TEXT = st.one_of(
    st.text(alphabet=st.sampled_from('ab"\\[]{}:, \u00e9\u4e2d\U0001f600'), max_size=12),
    st.text(alphabet=st.sampled_from('[{"\\'), min_size=60, max_size=100),
)
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**80), max_value=10**80), st.floats(allow_nan=False, allow_infinity=False), TEXT
)
DOCUMENTS = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)), max_leaves=30)


def depth(node: Any) -> int:
    if isinstance(node, dict):
        return 1 + max((depth(v) for v in node.values()), default=0)
    if isinstance(node, list):
        return 1 + max((depth(v) for v in node), default=0)
    return 0


def nested(document: Any, wrappers: list[bool]) -> Any:
    for as_object in wrappers:
        document = {"k": document} if as_object else [document]
    return document


@SETTINGS
@given(document=DOCUMENTS, wrappers=st.lists(st.booleans(), max_size=MAX_DEPTH + 6), ascii_only=st.booleans())
def test_a_document_reads_back_unless_nested_too_deep(document: Any, wrappers: list[bool], ascii_only: bool) -> None:
    document = nested(document, wrappers)
    body = json.dumps(document, ensure_ascii=ascii_only).encode()
    if depth(document) > MAX_DEPTH:
        with pytest.raises(BodyRefused) as refused:
            strict_json.decode(body)
        assert refused.value.rule == "maxDepth"
    else:
        assert strict_json.decode(body) == json.loads(body)


@SETTINGS
@given(body=st.one_of(st.binary(max_size=300), TEXT.map(str.encode), DOCUMENTS.map(lambda d: json.dumps(d).encode()[:-1])))
def test_any_bytes_are_a_document_or_refused_with_a_rule(body: bytes) -> None:
    try:
        strict_json.decode(body)
    except BodyRefused as refused:
        assert refused.rule in {"json", "duplicate", "maxDepth", "number"} and refused.message


@SETTINGS
@given(
    parts=st.lists(st.tuples(DOCUMENTS, st.lists(st.booleans(), max_size=MAX_DEPTH + 6)), min_size=1, max_size=4),
    ascii_only=st.booleans(),
)
def test_the_depth_count_is_the_documents_depth(parts: list[tuple[Any, list[bool]]], ascii_only: bool) -> None:
    """The bracket count (peeled, then counted) against a walk, on siblings of unequal depth."""
    document = [nested(inner, wrappers) for inner, wrappers in parts]
    assert strict_json._depth(json.dumps(document, ensure_ascii=ascii_only).encode()) == depth(document)
