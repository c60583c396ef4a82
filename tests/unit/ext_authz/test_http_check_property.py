"""No request makes the HTTP check answer 5xx (issue 24, item 5), by property.

The check in process (``HttpCheck``, the handler Http1Server calls: a raise there is its
500) with a real compiled ``RouteTable`` holding two validated routes, one public and one
that takes a token, both with header, query and body rules. Hypothesis throws generated
requests at it: headers (an odd or missing content-type, tokens good and bad, any
latin-1 text, as Http1Server decodes them), query strings (duplicates, bad escapes,
huge numbers, too many parameters) and bodies (JSON documents, a valid order bent one
way, arbitrary bytes, and the hostile ones: numbers of thousands of digits, nesting
hundreds deep, invalid UTF-8, duplicate keys, NaN, lone surrogates, UTF-16).

Every answer must be a well-formed 2xx or 4xx. And a 200 for a body must be one an
independent reader accepts: json.loads refusing duplicate keys, the reference
``jsonschema`` library, the allowed fields, a JSON content-type (differential: what the
check let through is what the rules describe). The run prints how many requests it
generated; ``GATEHOUSE_PROPERTY_EXAMPLES`` sets it (default 1000).
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import jsonschema
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from control_plane.model.validation import Validation
from control_plane.translator.validation import validation_policy
from ext_authz.denial_audit import DenialAudit
from ext_authz.check.http_check import HttpCheck
from ext_authz.check.route_table import RouteTable
from ext_authz.check.steps import CheckParts
from servicekit.check_contract import ROUTE_HEADER
from ext_authz.check.json_media_type import refusal
from servicekit.audit import MemoryAuditSink
from servicekit.http1_server import Request
from servicekit.protos.gatehouse.policy.v1 import policy_pb2
from tests.integration.test_http_check_limits import issuer_authorizer, parse
from tests.unit.ext_authz.signing import claims, rsa_key

EXAMPLES = int(os.environ.get("GATEHOUSE_PROPERTY_EXAMPLES", "1000"))
SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["customerId", "items"],
    "properties": {
        "customerId": {"type": "string", "format": "uuid"},
        "note": {"type": "string", "maxLength": 50},
        "amount": {"type": "number", "maximum": 1e6},
        "items": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["sku"],
                "properties": {"sku": {"type": "string", "pattern": "^[A-Z]-[0-9]+$"}, "quantity": {"type": "integer", "minimum": 1},
                               "tags": {"type": "array"}},
            },
        },
    },
}
ALLOWED = ["customerId", "items", "note", "amount"]
RULES = {
    "headers": [{"name": "x-client-id", "pattern": "^[a-z0-9-]{8,64}$"}],
    "query": [{"name": "page", "type": "integer", "minimum": 1}, {"name": "dryRun", "type": "boolean"}, {"name": "ratio", "type": "number"}],
    "body": {"maxBytes": 64 * 1024, "allowedFields": ALLOWED, "schema": SCHEMA},
}
ROUTES = {"shop/signup": True, "shop/orders": False}
"""Route → public."""
GOOD: dict[str, Any] = {"customerId": "9b2f6c1e-7d4a-4f0e-9a35-2c8e1b7f4d60", "items": [{"sku": "A-1", "quantity": 2}]}
TOKEN = rsa_key().sign(claims())
UNVALIDATED = "the body could not be validated"

# -- requests --------------------------------------------------------------------------------

LATIN1 = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=255), max_size=40)
CONTENT_TYPES = st.one_of(
    st.sampled_from([
        "application/json", "application/json; charset=utf-8", "APPLICATION/JSON;CHARSET=\"UTF-8\"", "application/problem+json",
        "application/x-www-form-urlencoded", "text/plain", "multipart/form-data; boundary=x", "application/json; charset=utf-16",
        "application/json, application/x-www-form-urlencoded", "application/json;", "application/+json", "application/json; a=b; c=d",
        "application/json; charset=\"utf-8\\\"", "application/json\x00", "*/*", "", " ", "application/", "/json",
    ]),
    LATIN1,
)
JSON_TEXT = st.text(max_size=20)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), JSON_TEXT)
DOCUMENTS = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(JSON_TEXT, inner, max_size=4)),
                         max_leaves=20)


def _order(change: tuple[str, Any]) -> dict[str, Any]:
    field, value = change
    return {**GOOD, field: value}


ORDERS = st.one_of(
    st.just(GOOD),
    st.tuples(st.sampled_from([*ALLOWED, "isAdmin", "items"]), DOCUMENTS).map(_order),
    st.builds(lambda items: {**GOOD, "items": items}, st.lists(st.dictionaries(st.sampled_from(["sku", "quantity", "tags", "price"]), DOCUMENTS), max_size=3)),
)


def _deep(depth: int, objects: bool) -> bytes:
    return (b'{"a":' * depth + b"1" + b"}" * depth) if objects else (b"[" * depth + b"]" * depth)


def _in_order(raw: bytes) -> bytes:
    """A hostile value where the note goes: the rest of the order is valid."""
    return b'{"customerId":"9b2f6c1e-7d4a-4f0e-9a35-2c8e1b7f4d60","items":[{"sku":"A-1"}],"note":' + raw + b"}"


# Sizes at the limits that matter (64 levels, the validator's 255, Python's 4,300 digits),
# not left to chance: Hypothesis favours small integers.
SIZES = st.one_of(st.sampled_from([63, 64, 65, 100, 101, 255, 256, 300, 3000, 4300, 4301, 6000]), st.integers(1, 6000))
HOSTILE = st.one_of(
    SIZES.map(lambda n: b"9" * n),
    SIZES.map(lambda n: b"-1." + b"5" * n + b"e" + str(n).encode()),
    st.sampled_from([b"1e400", b"-1e999", b"NaN", b"Infinity", b"-Infinity", b'"\\ud800"', b'"\\udc00\\ud800"', b'"\\ud83d\\ude00"',
                     b'"\\u0000"', b'{"\\ud800": 1}']),
    st.builds(_deep, SIZES, st.booleans()),
    st.binary(max_size=30).map(lambda raw: b'"' + raw + b'"'),
)
DUPLICATED = st.sampled_from([b'"9b2f6c1e-7d4a-4f0e-9a35-2c8e1b7f4d60"', b'"short note"', b"true", b"{}"])
BODIES = st.one_of(
    # Half the bad bodies: a hostile value in an otherwise valid order, the likeliest to get far.
    HOSTILE.map(_in_order),
    st.one_of(
        ORDERS.map(lambda d: json.dumps(d).encode()),
        DOCUMENTS.map(lambda d: json.dumps(d, ensure_ascii=False).encode()),
        HOSTILE,
        # A key twice, the copies valid or not (the last copy, which Python keeps, valid half the time).
        st.builds(lambda name, a, b: _in_order(b'"ok"').replace(b"{", b'{"%s":%s,"%s":%s,' % (name, a, name, b), 1),
                  st.sampled_from([b"customerId", b"note", b"isAdmin"]), DUPLICATED, DUPLICATED),
        ORDERS.map(lambda d: json.dumps(d).encode("utf-16")),
        ORDERS.map(lambda d: b"\xef\xbb\xbf" + json.dumps(d).encode()),
        st.tuples(ORDERS.map(lambda d: json.dumps(d).encode()), st.binary(min_size=1, max_size=4), st.integers(0, 200)).map(
            lambda t: t[0][: t[2]] + t[1] + t[0][t[2]:]
        ),
        st.binary(max_size=200),
        st.just(b""),
    ),
)
QUERY_VALUES = st.one_of(
    st.sampled_from(["1", "0", "-1", "true", "false", "1e999", "-9" * 30, "9" * 5000, "%", "%zz", "%ff%fe", "%00", "1.5", "nan", "+1", " 1"]),
    st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=255, exclude_characters="#"), max_size=12),
)
QUERIES = st.one_of(
    st.lists(st.tuples(st.sampled_from(["page", "dryRun", "ratio", "x", "page%00", "p%61ge"]), QUERY_VALUES), max_size=6).map(
        lambda pairs: "&".join(f"{k}={v}" for k, v in pairs)
    ),
    st.integers(250, 300).map(lambda n: "&".join(f"p{i}=1" for i in range(n))),
    LATIN1,
)
HEADER_NAMES = st.sampled_from(["x-request-id", "x-forwarded-for", "x-api-key", "cookie", "traceparent", "x-user-id", "x-scope",
                                "content-length", "transfer-encoding", "content-encoding", "x-client-id"])
CLIENT_IDS = st.one_of(st.just("client-0001"), LATIN1)
TOKENS = st.one_of(st.none(), st.just(f"Bearer {TOKEN}"), st.just(f"Bearer {TOKEN}x"), LATIN1, st.just("Bearer " + "a" * 9000))


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, Request]:
    """Each header and the query are good seven times in eight, the body half the time, so
    some requests pass and most fail on one part at a time, deep in the check (the body,
    last), not always on the first rule."""

    def part(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any], one_in: int = 8) -> Any:
        return draw(bad if draw(st.integers(1, one_in)) == 1 else good)

    route = draw(st.sampled_from(sorted(ROUTES)))
    headers = dict(draw(st.lists(st.tuples(HEADER_NAMES, LATIN1), max_size=3)))
    headers[ROUTE_HEADER] = route
    for name, good, bad in (
        ("x-client-id", st.just("client-0001"), st.one_of(st.none(), LATIN1)),
        ("content-type", st.sampled_from(["application/json", "application/json; charset=utf-8"]), st.one_of(st.none(), CONTENT_TYPES)),
        ("authorization", st.just(f"Bearer {TOKEN}"), TOKENS),
    ):
        value = part(good, bad)
        if value is not None:
            headers[name] = value
    query = part(st.sampled_from(["", "?page=2&dryRun=true&ratio=0.5"]), QUERIES.map(lambda q: "?" + q))
    body = part(ORDERS.map(lambda d: json.dumps(d).encode()), BODIES, one_in=2)
    return route, Request(draw(st.sampled_from(["POST", "PUT", "GET"])), "/check/orders" + query, headers, body)


def _known(body: bytes, content_type: str = "application/json") -> tuple[str, Request]:
    """Issue 24's holes, as requests every run tries first (Hypothesis's explicit examples)."""
    headers = {ROUTE_HEADER: "shop/orders", "authorization": f"Bearer {TOKEN}", "x-client-id": "client-0001", "content-type": content_type}
    return "shop/orders", Request("POST", "/check/orders", headers, body)


KNOWN_HOLES = (
    _known(json.dumps(GOOD).encode(), "application/x-www-form-urlencoded"),
    _known(b'{"customerId":"x","customerId":"9b2f6c1e-7d4a-4f0e-9a35-2c8e1b7f4d60","items":[{"sku":"A-1"}]}'),
    _known(_in_order(b"9" * 4301)),
    _known(_in_order(b"[" * 300 + b"]" * 300)),
    _known(_in_order(b'"\\ud800"')),
)


# -- the property ----------------------------------------------------------------------------


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    assert len(found) == len(pairs), "a 200 for a body with a duplicate key"
    return found


def _read_independently(request: Request) -> None:
    """What a 200 let through, read by other code: JSON content-type, no duplicate key,
    nothing but text in its strings, the reference validator, the allowed fields."""
    if not request.body:
        return
    assert refusal(request.headers.get("content-type")) is None, "a 200 for a body not sent as JSON"
    document = json.loads(request.body.decode("utf-8"), object_pairs_hook=_no_duplicates)
    json.dumps(document, ensure_ascii=False).encode("utf-8")  # no lone surrogate: text every parser reads alike
    jsonschema.validate(document, SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    assert set(document) <= set(ALLOWED)


async def _check() -> HttpCheck:
    authorizer, _ = await issuer_authorizer()
    table = RouteTable(CheckParts(authorizer, DenialAudit(MemoryAuditSink())))
    policies = []
    for route, public in ROUTES.items():
        policy = policy_pb2.RoutePolicy(route=route)
        policy.auth.SetInParent()
        policy.auth.public = public
        policy.validation.CopyFrom(validation_policy(Validation.model_validate(RULES)))
        policies.append(policy)
    table.replace(policies)
    return HttpCheck(table)


def test_no_request_makes_the_check_answer_5xx() -> None:
    loop = asyncio.new_event_loop()
    check = loop.run_until_complete(_check())
    seen: dict[int, int] = {}

    def one(drawn: tuple[str, Request]) -> None:
        route, request = drawn
        status, headers, body = parse(loop.run_until_complete(check(request)))
        seen[status] = seen.get(status, 0) + 1
        assert 200 <= status < 500, (status, body[:300])
        if status == 200:
            _read_independently(request)
        else:
            assert headers["content-type"] == "application/json" and json.loads(body)["error"]["code"], (status, body[:300])
        if status in (400, 415):
            error = json.loads(body)["error"]
            assert error["rule"], body
            # The validator's own failure is a 400 too, but every known input has its rule.
            assert error["message"] != UNVALIDATED, "a body only the last-resort catch refused"
        if not ROUTES[route] and status in (400, 415):
            assert request.headers.get("authorization") == f"Bearer {TOKEN}", "the rules are checked after the token"

    for hole in KNOWN_HOLES:
        one = example(drawn=hole)(one)
    run = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])(
        given(drawn=requests())(one)
    )
    try:
        run()
    finally:
        loop.close()
    total = sum(seen.values())
    print(f"\nHTTP check property: {total} generated requests, answers by status {dict(sorted(seen.items()))}")
    assert total >= EXAMPLES
    assert {200, 400, 401, 415} <= seen.keys(), f"the generated requests reach every kind of answer: {seen}"
