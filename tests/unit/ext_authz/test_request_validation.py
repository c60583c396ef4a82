"""Request validation's per-request decisions (ext_authz/check/validation.py), from the
policy the control plane sends: which rule fails, what the client is told (never its
values), and that a table compiles each schema once."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from control_plane.model.validation import Validation
from control_plane.translator.validation import validation_policy
from ext_authz.check.validation import MAX_ECHOED, Compiler, RequestRules
from servicekit.protos.gatehouse.policy.v1 import policy_pb2

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
HEADERS = {"x-client-id": "client-0001", "content-type": "application/json"}


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
        ({"body": b"\xff\xfe{"}, ("body", "", "json", "the body is not valid JSON: not UTF-8 (byte 0)")),
        ({"body": b"[" * 1020 + b"]" * 1020}, ("body", "", "maxDepth", "the body is nested more than 64 levels deep")),
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
    assert optional.check("/check/x", {}, b"") is None, "no body, so no content-type is needed"
    assert optional.check("/check/x", {"content-type": "application/json"}, b"[]") is not None


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


ANY_OBJECT = {"body": {"schema": {"type": "object"}}}
"""64 KiB, so the bodies below fit: what the rules refuse is how the body is written."""
SURROGATE_MESSAGE = "holds an unpaired UTF-16 surrogate escape, which is not text"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # Python keeps the last copy of a key, a first-wins upstream the other.
        (b'{"role": "user", "role": "admin"}', ("body", "/role", "duplicate", "body /role is given more than once; each key once")),
        (b'{"a": [{}, {"b": {"x": 1, "x": 1}}]}', ("body", "/a/1/b/x", "duplicate", "body /a/1/b/x is given more than once; each key once")),
        # A duplicate is found mid-parse; what is wrong further on is named as it would have been.
        (b'{"a": {"x": 1, "x": 2}, "b": tru}', ("body", "", "json", "the body is not valid JSON: Expecting value (byte 29)")),
        (b'{"a": {"x": 1, "x": 2}, "b": ' + b"[" * 65 + b"]" * 65 + b"}", ("body", "", "maxDepth", "the body is nested more than 64 levels deep")),
        # A 4,301-digit integer raised Python's int-conversion ValueError: the check answered 500.
        (b'{"n": ' + b"1" * 4301 + b"}", ("body", "", "number", "the body has a number longer than 100 characters")),
        (b'{"n": 1' + b"0" * 100 + b"}", ("body", "", "number", "the body has a number longer than 100 characters")),
        (b'{"n": 1e400}', ("body", "", "number", "the body has a number beyond the range of a double")),
        (b'{"n": -Infinity}', ("body", "", "json", "the body is not valid JSON: NaN and Infinity are not JSON values")),
        (b'{"n": NaN}', ("body", "", "json", "the body is not valid JSON: NaN and Infinity are not JSON values")),
        # Nested a few hundred levels: the validator's "Recursion limit reached" ValueError, a 500.
        (b'{"a": ' + b"[" * 300 + b"]" * 300 + b"}", ("body", "", "maxDepth", "the body is nested more than 64 levels deep")),
        (b"[" * 65 + b"]" * 65, ("body", "", "maxDepth", "the body is nested more than 64 levels deep")),
        (b'{"a": ' * 65 + b"1" + b"}" * 65, ("body", "", "maxDepth", "the body is nested more than 64 levels deep")),
        # A lone surrogate has no UTF-8 form: the validator raised UnicodeEncodeError, a 500.
        (b'{"a": ["x", "\\ud800"]}', ("body", "/a/1", "json", f"body /a/1 {SURROGATE_MESSAGE}")),
        (b'{"\\udfff": 1}', ("body", "/?", "json", f"body /? {SURROGATE_MESSAGE}")),
        (b'\xef\xbb\xbf{"a": 1}', ("body", "", "json", "the body is not valid JSON: it starts with a byte order mark")),
        # Python would guess UTF-16 from the bytes; the upstream reads UTF-8.
        ('{"a": 1}'.encode("utf-16"), ("body", "", "json", "the body is not valid JSON: not UTF-8 (byte 0)")),
    ],
    ids=["duplicate", "nested-duplicate", "duplicate-then-invalid", "duplicate-and-too-deep", "4301-digits", "101-chars", "1e400", "infinity", "nan", "300-deep", "65-deep-arrays",
         "65-deep-objects", "lone-surrogate", "surrogate-key", "bom", "utf-16"],
)
def test_a_body_parsers_would_read_differently_is_a_400_naming_the_rule(body: bytes, expected: tuple[str, str, str, str]) -> None:
    found = rules(ANY_OBJECT).check("/check/x", {"content-type": "application/json"}, body)
    assert found is not None and (found.location, found.field, found.rule, found.message) == expected
    assert found.answer("r").startswith(b"HTTP/1.1 400 Bad Request\r\n")


@pytest.mark.parametrize(
    "body",
    [
        b'{"a": ' + b"[" * 63 + b"]" * 63 + b"}",
        b'{"a": ' * 63 + b"[1]" + b"}" * 63,
        b'{"n": 1' + b"0" * 99 + b"}",
        b'{"n": -1.5e300, "m": 1e-400}',
        b'{"a": "\\ud83d\\ude00", "b": "\\\\ud800"}',
        b'{"a": "' + b"[" * 200 + b'\\"' + b"{" * 200 + b'"}',
        b'{"a": {"b": 1}, "b": {"a": 1}}',
    ],
    ids=["64-deep", "64-deep-mixed", "100-chars", "finite", "surrogate-pair-and-escaped-backslash", "brackets-in-strings", "same-name-other-objects"],
)
def test_bodies_at_the_bounds_pass(body: bytes) -> None:
    assert rules(ANY_OBJECT).check("/check/x", {"content-type": "application/json"}, body) is None


@pytest.mark.parametrize(
    ("content_type", "reason"),
    [
        (None, "a body needs a content-type"),
        ("application/x-www-form-urlencoded", "the content-type is not JSON"),
        ("text/plain", "the content-type is not JSON"),
        ("text/json", "the content-type is not JSON"),
        ("multipart/form-data; boundary=x", "the content-type is not JSON"),
        ("application/json; charset=utf-16", "the content-type's charset is not utf-8"),
        ("application/json; charset=latin1", "the content-type's charset is not utf-8"),
        ("application/json; odata=verbose", "the content-type has a parameter JSON does not define"),
        ("application/json; charset=utf-8; charset=utf-16", "the content-type has a parameter JSON does not define"),
        ("application/json, application/x-www-form-urlencoded", "the content-type is not one media type"),
        ("application/json;", "the content-type is not one media type"),
        ("application/json ; charset = utf-8", "the content-type is not one media type"),
    ],
)
def test_a_body_not_sent_as_json_is_415_naming_the_content_type(content_type: str | None, reason: str) -> None:
    headers = {} if content_type is None else {"content-type": content_type}
    found = rules(ANY_OBJECT).check("/check/x", headers, b'{"a": 1}')
    assert found is not None and (found.location, found.field, found.rule, found.status) == ("header", "content-type", "contentType", 415)
    assert found.message.startswith(reason + ": application/json or application/*+json")
    raw = found.answer("req-4")
    assert raw.startswith(b"HTTP/1.1 415 Unsupported Media Type\r\n")
    assert json.loads(raw.partition(b"\r\n\r\n")[2])["error"]["code"] == "unsupported_media_type"
    if content_type:
        assert content_type.encode() not in raw, "the client's value is not echoed"


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "Application/JSON", "application/json; charset=utf-8", 'application/json;charset="UTF-8"',
     "application/merge-patch+json", "application/vnd.api+json ; charset=utf-8", " application/json\t"],
)
def test_json_media_types_pass(content_type: str) -> None:
    assert rules(ANY_OBJECT).check("/check/x", {"content-type": content_type}, b'{"a": 1}') is None


def test_an_empty_optional_body_needs_no_content_type_and_a_required_one_is_required_first() -> None:
    optional = rules({"body": {"required": False, "schema": {"type": "object"}}})
    assert optional.check("/check/x", {"content-type": "text/plain"}, b"") is None
    found = rules(ANY_OBJECT).check("/check/x", {"content-type": "text/plain"}, b"")
    assert found is not None and found.rule == "required"


def test_a_validator_that_fails_is_a_400_not_an_error() -> None:
    """Belt and braces: were the validator to raise on an input strict_json let through,
    the client gets a 400 (a 500 would pass the request unchecked under failOpen)."""

    class Failing:
        def validate(self, document: Any) -> None:
            raise ValueError("Recursion limit reached")

    rule = rules(ANY_OBJECT).body
    assert rule is not None
    broken = dataclasses.replace(rule, validator=Failing())  # type: ignore[arg-type]
    found = broken.check(b'{"a": 1}', "application/json")
    assert found is not None and (found.status, found.rule, found.message) == (400, "json", "the body could not be validated")
