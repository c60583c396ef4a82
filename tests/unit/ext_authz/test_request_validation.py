"""Request validation's per-request decisions (ext_authz/request_validation.py), from the
policy the control plane sends: which rule fails, what the client is told (never its
values), and that a table compiles each schema once."""

from __future__ import annotations

import json
from typing import Any

import pytest

from control_plane.model.validation import Validation
from control_plane.translator.validation import validation_policy
from ext_authz.request_validation import MAX_ECHOED, Compiler, RequestRules
from servicekit.protos.gatehouse.ratelimit.v1 import policy_pb2

RULES = {
    "headers": [{"name": "x-client-id", "pattern": "^[a-z0-9-]{8,64}$"}],
    "query": [{"name": "page", "type": "integer", "minimum": 1}, {"name": "dryRun", "type": "boolean"}],
    "body": {
        "maxBytes": 2048,
        "allowedFields": ["customerId", "items", "note"],
        "schema": {
            "type": "object",
            "required": ["customerId", "items"],
            "properties": {
                "customerId": {"type": "string", "format": "uuid"},
                "note": {"type": "string", "maxLength": 20},
                "items": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["sku"],
                        "properties": {"sku": {"type": "string"}, "quantity": {"type": "integer", "minimum": 1}},
                    },
                },
            },
        },
    },
}
GOOD = {"customerId": "9b2f6c1e-7d4a-4f0e-9a35-2c8e1b7f4d60", "items": [{"sku": "A-1", "quantity": 2}]}
HEADERS = {"x-client-id": "client-0001"}


def rules(data: dict[str, Any] = RULES) -> RequestRules:
    return Compiler().rules("shop/orders", validation_policy(Validation.model_validate(data)))


def check(path: str = "/check/orders?page=2", headers: dict[str, str] = HEADERS, body: Any = GOOD) -> tuple[str, str, str, str] | None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    found = rules().check(path, headers, raw)
    return None if found is None else (found.location, found.field, found.rule, found.message)


def test_a_valid_request_passes() -> None:
    assert check() is None
    assert check("/check/orders") is None, "page is optional"


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"headers": {}}, ("header", "x-client-id", "required", "header x-client-id is required")),
        ({"headers": {"x-client-id": "NO"}}, ("header", "x-client-id", "pattern", "header x-client-id does not match the required pattern")),
        ({"path": "/check/orders?page=two"}, ("query", "page", "type", "query page must be of type integer")),
        ({"path": "/check/orders?page=0"}, ("query", "page", "minimum", "query page must be at least 1.0")),
        ({"path": "/check/orders?page=1&page=2"}, ("query", "page", "duplicate", "query page must be given once")),
        ({"path": "/check/orders?dryRun=yes"}, ("query", "dryRun", "type", "query dryRun must be of type boolean")),
        ({"body": b""}, ("body", "", "required", "a JSON body is required")),
        ({"body": b'{"customerId": '}, ("body", "", "json", "the body is not valid JSON: Expecting value (byte 15)")),
        ({"body": b"\xff\xfe{"}, ("body", "", "json", "the body is not valid JSON: not UTF-8")),
        ({"body": b"[" * 1020 + b"]" * 1020}, ("body", "", "json", "the body is not valid JSON: nested too deeply")),
        ({"body": b"x" * 2049}, ("body", "", "maxBytes", "the body is larger than 2048 bytes")),
        ({"body": {**GOOD, "isAdmin": True}}, ("body", "/isAdmin", "allowedFields", "body /isAdmin is not an allowed field")),
        ({"body": [1]}, ("body", "", "type", "the body must be a JSON object")),
        ({"body": {"items": GOOD["items"]}}, ("body", "/customerId", "required", "body /customerId is required")),
        ({"body": {**GOOD, "customerId": "x"}}, ("body", "/customerId", "format", "body /customerId must be a valid uuid")),
        ({"body": {**GOOD, "items": [{"sku": "A", "quantity": "2"}]}}, ("body", "/items/0/quantity", "type", "body /items/0/quantity must be of type integer")),
        ({"body": {**GOOD, "items": [{"sku": "A", "price": 0}]}}, ("body", "/items/0/price", "additionalProperties", "body /items/0/price is not an allowed field")),
        ({"body": {**GOOD, "items": []}}, ("body", "/items", "minItems", "body /items must have at least 1 items")),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_each_failure_names_location_field_and_rule(kwargs: dict[str, Any], expected: tuple[str, str, str, str]) -> None:
    assert check(**kwargs) == expected


def test_no_client_value_is_echoed_and_names_are_cut() -> None:
    secret = "s3cr3t-" + "v" * 500
    answer = rules().check("/check/orders", HEADERS, json.dumps({**GOOD, "note": secret}).encode())
    assert answer is not None and answer.rule == "maxLength"
    raw = answer.answer("req-9")
    assert secret[:10].encode() not in raw
    assert raw.startswith(b"HTTP/1.1 400 Bad Request\r\n") and b"content-type: application/json" in raw
    body = json.loads(raw.partition(b"\r\n\r\n")[2])
    assert body == {"error": {"code": "invalid_request", "message": "body /note must have at most 20 characters", "request_id": "req-9",
                              "location": "body", "field": "/note", "rule": "maxLength"}}
    long_name = "n" * 1000
    extra = rules().check("/check/orders", HEADERS, json.dumps({**GOOD, long_name: 1}).encode())
    assert extra is not None and len(extra.field) <= MAX_ECHOED + 2


def test_an_oversized_body_that_got_here_is_413_in_the_gateway_shape() -> None:
    answer = rules().check("/check/orders", HEADERS, b" " * 4096)
    assert answer is not None
    raw = answer.answer("r")
    assert raw.startswith(b"HTTP/1.1 413 ")
    assert json.loads(raw.partition(b"\r\n\r\n")[2])["error"]["code"] == "request_body_too_large"


def test_a_body_is_optional_only_when_the_rule_says() -> None:
    optional = rules({"body": {"required": False, "schema": {"type": "object"}}})
    assert optional.check("/check/x", {}, b"") is None
    assert optional.check("/check/x", {}, b"[]") is not None


def test_a_table_compiles_each_schema_text_once_and_forgets_unused_ones() -> None:
    compiler = Compiler()
    message = validation_policy(Validation.model_validate(RULES))
    compiler.begin()
    first = compiler.rules("a/one", message)
    second = compiler.rules("a/two", message)
    compiler.done()
    assert first.body is not None and second.body is not None and first.body.validator is second.body.validator
    compiler.begin()
    again = compiler.rules("a/one", message)
    compiler.done()
    assert again.body is not None and again.body.validator is first.body.validator, "reused across updates"


def test_a_rule_the_service_cannot_use_names_the_route() -> None:
    message = policy_pb2.RequestValidation()
    message.body.schema_json = '{"type": "strin"}'
    with pytest.raises(ValueError, match=r"route shop/orders: validation: type: "):
        Compiler().rules("shop/orders", message)
