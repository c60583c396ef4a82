"""``validate:`` as the author sees it: every bad rule is `file:line: field: reason`,
naming the field inside a body schema that does not compile, and a good block loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from control_plane.model import Origin, parse_route_file
from control_plane.model.validation import DEFAULT_BODY_BYTES

FILE = "routes/orders.yaml"
HEADER = (
    "apiVersion: gatehouse.io/v1alpha1\nkind: Route\nmetadata: {name: orders, namespace: shop}\nspec:\n"
    "  match: {path: /orders}\n  backends: [{service: order-service, port: 8080}]\n  validate:\n"
)
"""Lines 1-7; the validate block's own lines start at 8."""


def route(*lines: str) -> str:
    return HEADER + "".join(line + "\n" for line in lines)


def problems(text: str) -> list[str]:
    routes, found = parse_route_file(text, Origin("git", FILE))
    assert not routes or not found
    return [str(p) for p in found]


CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    "schema type misspelt": (
        route("    body:", "      schema:", "        type: object", "        properties:", "          age: {type: strin}"),
        (f"{FILE}:12:", "spec.validate.body.schema.properties.age.type:", "strin"),
    ),
    "schema bad regex": (
        route("    body:", "      schema: {properties: {sku: {type: string, pattern: '(['}}}"),
        (f"{FILE}:", "spec.validate.body.schema.properties.sku.pattern:", "regex"),
    ),
    "schema remote ref": (
        route("    body:", "      schema: {properties: {a: {$ref: 'http://127.0.0.1:1/x.json'}}}"),
        ("spec.validate.body", "only references into this schema", "nothing is fetched"),
    ),
    "schema dangling local ref": (
        route("    body:", "      schema: {$ref: '#/$defs/missing'}"),
        ("spec.validate.body", "schema", "/$defs/missing"),
    ),
    "schema unknown format": (
        route("    body:", "      schema: {properties: {when: {type: string, format: nonsense}}}"),
        ("spec.validate.body.schema.properties.when.format:", "nonsense"),
    ),
    "schema not an object": (
        route("    body:", "      schema: [1, 2]"),
        ("spec.validate.body.schema:", "valid dictionary"),
    ),
    "body limit above the bound": (
        route("    body: {allowedFields: [a], maxBytes: 2000000}"),
        ("spec.validate.body.maxBytes:", "1048576"),
    ),
    "body with neither": (
        route("    body: {maxBytes: 100}"),
        ("spec.validate.body:", "give a schema, allowedFields, or both"),
    ),
    "empty validate": (
        route("    headers: []"),
        ("spec.validate:", "give headers, query or body"),
    ),
    "header name uppercase": (
        route("    headers: [{name: X-Client}]"),
        (f"{FILE}:8:", "spec.validate.headers[0].name:", "pattern"),
    ),
    "header listed twice": (
        route("    headers: [{name: x-client}, {name: x-client}]"),
        ("spec.validate.headers:", "'x-client' is listed twice"),
    ),
    "header bad pattern": (
        route("    headers: [{name: x-client, pattern: '(['}]"),
        ("spec.validate.headers[0]", "pattern", "regex"),
    ),
    "query unknown type": (
        route("    query: [{name: page, type: int}]"),
        ("spec.validate.query[0].type:", "'string', 'integer', 'number' or 'boolean'"),
    ),
    "query minimum on a string": (
        route("    query: [{name: page, minimum: 1}]"),
        ("spec.validate.query[0]:", "minimum and maximum apply to type integer or number, not string"),
    ),
    "query enum on an integer": (
        route("    query: [{name: page, type: integer, enum: ['1']}]"),
        ("spec.validate.query[0]:", "enum, pattern and format apply to type string"),
    ),
    "query unknown field": (
        route("    query: [{name: page, typ: integer}]"),
        ("spec.validate.query[0].typ:", "unknown field"),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_bad_rule_names_file_line_field_and_reason(case: str) -> None:
    text, expected = CASES[case]
    found = problems(text)
    assert len(found) == 1, found
    for part in expected:
        assert part in found[0], (part, found[0])


def test_a_good_block_loads_with_its_defaults() -> None:
    routes, found = parse_route_file(
        route(
            "    headers: [{name: x-client-id, pattern: '^[a-z0-9-]{8,64}$'}, {name: x-trace, required: false}]",
            "    query: [{name: page, type: integer, minimum: 1}, {name: since, format: date-time, required: true}]",
            "    body:",
            "      allowedFields: [customerId, items]",
            "      schema: {type: object, required: [customerId], properties: {customerId: {type: string, format: uuid}}}",
        ),
        Origin("git", FILE),
    )
    assert found == []
    rules = routes[0].spec.validate_
    assert rules is not None and rules.body is not None
    assert [h.required for h in rules.headers] == [True, False]
    assert rules.query[0].value_schema() == {"type": "integer", "minimum": 1}
    assert rules.body.max_bytes == DEFAULT_BODY_BYTES and rules.body.required


@pytest.mark.usefixtures("restore_logging")
def test_the_error_reaches_gatehouse_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gatehouse.cli import main

    (tmp_path / "orders.yaml").write_text(
        route("    body:", "      schema:", "        type: object", "        properties:", "          age: {type: strin}")
    )
    code = main(["validate", str(tmp_path)])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code != 0
    assert "orders.yaml:12" in text and "spec.validate.body.schema.properties.age.type" in text, text


def test_the_crd_keeps_a_body_schema_as_written() -> None:
    from control_plane.model.crd import spec_schema

    body = spec_schema()["properties"]["validate"]["properties"]["body"]["properties"]["schema"]
    assert body == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}, json.dumps(body)
