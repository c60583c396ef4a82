"""Request validation through real Envoy, the control plane and the HTTP check.

A table of bad requests (missing header, wrong type, extra field, oversized body, invalid
JSON, a bad query parameter, a missing token), each with its answer in the gateway's JSON
error shape; the upstream is called for none of them (its own request counter); a valid
request reaches it unchanged (path, query, headers, and the body by length and sha256).
A public route with a body rule gets the call too (no token). A route whose schema does
not compile is refused at load with the file and the field, and the other routes serve.

Issue 24, item 5: one test per hole, each named for it (``test_hole_*``), with
``extAuthz.failOpen: true`` (the setting under which a check that fails lets the request
through): a JSON body sent as a form, a duplicate key, a number of 4,301 digits, a body
nested 300 deep, a lone surrogate escape; and two content-type lines.
"""

from __future__ import annotations

import hashlib
import http.client
import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from tests.harness.ext_authz import ExtAuthzProcess
from tests.harness.http_client import Reply, wait_for
from tests.harness.issuer import TestIssuer
from tests.harness.route_repo import route_doc
from tests.integration.conftest import StackFactory, ext_authz_entry

ORDER_SCHEMA = {
    "type": "object",
    "required": ["customerId", "items"],
    "properties": {
        "customerId": {"type": "string", "format": "uuid"},
        "items": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["sku", "quantity"],
                "additionalProperties": False,
                "properties": {"sku": {"type": "string"}, "quantity": {"type": "integer", "minimum": 1}},
            },
        },
    },
}
ROUTES = [
    route_doc(
        "create-order",
        {
            "match": {"path": "/orders", "methods": ["POST"]},
            "backends": [{"service": "svc-a", "port": 8080}],
            "validate": {
                "headers": [{"name": "x-client-id", "pattern": "^[a-z0-9-]{8,64}$"}],
                "query": [{"name": "dryRun", "type": "boolean"}],
                "body": {"maxBytes": 1024, "allowedFields": ["customerId", "items"], "schema": ORDER_SCHEMA},
            },
        },
    ),
    route_doc(
        "signup",
        {
            "match": {"path": "/signup"},
            "backends": [{"service": "svc-b", "port": 8080}],
            "auth": {"required": False},
            "validate": {"body": {"maxBytes": 256, "schema": {"type": "object", "required": ["email"], "additionalProperties": False,
                                                               "properties": {"email": {"type": "string", "format": "email"}}}}},
        },
    ),
]
ROUTES.append(
    route_doc(
        "bulk-orders",
        {
            "match": {"path": "/bulk", "methods": ["POST"]},
            "backends": [{"service": "svc-b", "port": 8080}],
            "auth": {"required": False},
            "validate": {"body": {"maxBytes": 16384, "allowedFields": ["items", "note"], "schema": {
                "type": "object", "required": ["items"],
                "properties": {"note": {"type": "string", "maxLength": 100, "pattern": "^[^<>]*$"},
                               "items": ORDER_SCHEMA["properties"]["items"]}}}},  # type: ignore[index]
        },
    )
)
GOOD = {"customerId": "9b2f6c1e-7d4a-4f0e-9a35-2c8e1b7f4d60", "items": [{"sku": "ABC-1", "quantity": 2}]}
JSON = {"content-type": "application/json"}


def send(port: int, path: str, headers: dict[str, str], body: bytes) -> Reply:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("POST", path, body=body, headers=headers)
        reply = connection.getresponse()
        return Reply(reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read())
    finally:
        connection.close()


def served(upstream: Any) -> int:
    """The echo upstream's own count of requests it answered."""
    connection = http.client.HTTPConnection("127.0.0.1", upstream.port, timeout=5)
    try:
        connection.request("GET", "/admin/fail")
        count: int = json.loads(connection.getresponse().read())["served"]
        return count
    finally:
        connection.close()


def start(make_stack: StackFactory, tmp_path: Path, *, fail_open: bool = False) -> tuple[Any, ExtAuthzProcess, TestIssuer]:
    issuer = TestIssuer()
    jwks = str(issuer.write_jwks(tmp_path / "jwks.json"))
    authz = ExtAuthzProcess(
        tmp_path / "authz", {"issuers": [{"issuer": issuer.issuer, "audiences": [issuer.audience], "jwksFile": jwks}]}, transport="http"
    )
    ext_authz = {**ext_authz_entry([authz]), "forwardHeaders": ["x-client-id"], "failOpen": fail_open}
    if fail_open:
        # A check slower than its deadline passes under failOpen too; on a busy machine that
        # would pass a hole test's request for the wrong reason. Only a failed check may.
        ext_authz["timeout"] = "10s"
    gateway = make_stack(control_plane_extra={"extAuthz": ext_authz})
    gateway.commit_routes({"routes.yaml": ROUTES})
    gateway.start()
    authz.use_control_plane(gateway.control_plane.xds_port)
    authz.start()
    return gateway, authz, issuer


def test_bad_requests_get_their_answer_and_never_reach_the_upstream_and_a_good_one_passes_unchanged(
    make_stack: StackFactory, tmp_path: Path
) -> None:
    gateway, authz, issuer = start(make_stack, tmp_path)
    try:
        port = gateway.listener_port
        good_headers = {"authorization": f"Bearer {issuer.token('alice')}", "x-client-id": "client-0001", "content-type": "application/json"}
        good_body = json.dumps(GOOD).encode()
        # The route is live once a good request passes (Envoy and the check have its rules).
        wait_for(lambda: send(port, "/orders", good_headers, good_body).status == 200, 15, "the validated route serves")

        without = {k: v for k, v in good_headers.items() if k != "x-client-id"}
        table: list[tuple[str, str, dict[str, str], bytes, int, dict[str, str]]] = [
            ("missing header", "/orders", without, good_body, 400, {"location": "header", "field": "x-client-id", "rule": "required"}),
            ("header pattern", "/orders", {**good_headers, "x-client-id": "NO!"}, good_body, 400,
             {"location": "header", "field": "x-client-id", "rule": "pattern"}),
            ("query type", "/orders?dryRun=maybe", good_headers, good_body, 400, {"location": "query", "field": "dryRun", "rule": "type"}),
            ("wrong type", "/orders", good_headers, json.dumps({**GOOD, "items": [{"sku": "A", "quantity": "2"}]}).encode(), 400,
             {"location": "body", "field": "/items/0/quantity", "rule": "type"}),
            ("extra field", "/orders", good_headers, json.dumps({**GOOD, "isAdmin": True}).encode(), 400,
             {"location": "body", "field": "/isAdmin", "rule": "allowedFields"}),
            ("nested extra field", "/orders", good_headers, json.dumps({**GOOD, "items": [{"sku": "A", "quantity": 1, "price": 0}]}).encode(), 400,
             {"location": "body", "field": "/items/0/price", "rule": "additionalProperties"}),
            ("invalid JSON", "/orders", good_headers, b'{"customerId": "9b2f', 400, {"location": "body", "field": "", "rule": "json"}),
            ("missing body", "/orders", good_headers, b"", 400, {"location": "body", "field": "", "rule": "required"}),
            ("oversized body", "/orders", good_headers, json.dumps({**GOOD, "pad": "x" * 2000}).encode(), 413, {}),
        ]
        before = served(gateway.upstreams["svc-a"])
        rows = []
        for name, path, headers, body, status, expected in table:
            reply = send(port, path, headers, body)
            error = reply.json()["error"]
            rows.append((name, reply.status, error))
            assert reply.status == status, (name, reply.status, reply.body)
            assert reply.headers["content-type"] == "application/json", name
            assert error["request_id"], (name, error)
            if status == 400:
                assert error["code"] == "invalid_request" and {k: error[k] for k in expected} == expected, (name, error)
                # The message names the field, never the client's value.
                assert error["message"] and not [v for v in ("maybe", "True", "true", "NO!", "9b2f") if v in error["message"]], (name, error)
                assert "field" not in expected or expected["field"] in error["message"], (name, error)
            else:
                assert error["code"] == "request_body_too_large", (name, error)
        # A missing token is still the token's answer, not the rules'.
        no_token = send(port, "/orders", {k: v for k, v in good_headers.items() if k != "authorization"}, b"{}")
        assert no_token.status == 401 and "location" not in no_token.json()["error"]
        for name, status, error in rows:  # the table, for a reader of -s output
            print(f"{name:20} {status} {json.dumps({'error': error})}")
        assert served(gateway.upstreams["svc-a"]) == before, f"the upstream was called for a bad request: {rows}"
        assert authz.metric("gatehouse_authz_decisions_total", result="deny", reason="invalid_request") == 8

        # A valid request arrives unchanged: path and query, the client's headers, the body byte for byte.
        reply = send(port, "/orders?dryRun=true", good_headers, good_body)
        assert reply.status == 200, reply.body
        echoed = reply.json()
        assert echoed["path"] == "/orders?dryRun=true" and echoed["method"] == "POST"
        assert echoed["headers"]["x-client-id"] == "client-0001" and echoed["headers"]["x-user-id"] == "alice"
        assert "x-gatehouse-route" not in echoed["headers"]
        assert (echoed["bodyBytes"], echoed["bodySha256"]) == (len(good_body), hashlib.sha256(good_body).hexdigest())
        assert served(gateway.upstreams["svc-a"]) == before + 1
    finally:
        authz.stop()


def test_a_public_route_with_a_body_rule_is_checked_without_a_token(make_stack: StackFactory, tmp_path: Path) -> None:
    gateway, authz, _ = start(make_stack, tmp_path)
    try:
        port = gateway.listener_port
        good = json.dumps({"email": "ada@example.com"}).encode()
        wait_for(lambda: send(port, "/signup", JSON, good).status == 200, 15, "the public route serves")
        before = served(gateway.upstreams["svc-b"])
        bad = send(port, "/signup", JSON, json.dumps({"email": "ada@example.com", "role": "admin"}).encode())
        assert bad.status == 400 and bad.json()["error"]["field"] == "/role" and bad.json()["error"]["rule"] == "additionalProperties"
        assert send(port, "/signup", JSON, json.dumps({"email": "not-an-address"}).encode()).json()["error"]["rule"] == "format"
        assert send(port, "/signup", JSON, b"x" * 300).status == 413
        assert send(port, "/signup", {}, good).status == 415, "a body needs its content-type"
        assert served(gateway.upstreams["svc-b"]) == before
        ok = send(port, "/signup", JSON, good)
        assert ok.status == 200 and ok.json()["bodySha256"] == hashlib.sha256(good).hexdigest()
        assert "x-user-id" not in ok.json()["headers"]
    finally:
        authz.stop()


def test_a_schema_that_does_not_compile_refuses_that_route_only(make_stack: StackFactory, tmp_path: Path) -> None:
    gateway, authz, _ = start(make_stack, tmp_path)
    try:
        port = gateway.listener_port
        good = json.dumps({"email": "ada@example.com"}).encode()
        wait_for(lambda: send(port, "/signup", JSON, good).status == 200, 15, "the public route serves")
        broken = route_doc(
            "broken",
            {"match": {"path": "/broken"}, "backends": [{"service": "svc-a", "port": 8080}], "auth": {"required": False},
             "validate": {"body": {"schema": {"type": "object", "properties": {"age": {"type": "strin"}}}}}},
        )
        gateway.commit_routes({"broken.yaml": [broken]})
        wait_for(lambda: "spec.validate.body.schema.properties.age.type" in json.dumps(gateway.control_plane.status()), 15,
                 "the control plane reports the broken schema")
        status = json.dumps(gateway.control_plane.status())
        assert "broken.yaml" in status
        assert send(port, "/signup", JSON, good).status == 200, "the other routes keep serving"
        assert send(port, "/broken", JSON, good).status == 404
    finally:
        authz.stop()


# -- issue 24, item 5: the holes ---------------------------------------------------------------

BULK = b'{"items": [{"sku": "ABC-1", "quantity": 2}], "note": %s}'


def refused_and_not_served(gateway: Any, upstream: str, reply: Reply, before: int, status: int, rule: str, field: str = "") -> None:
    assert reply.status == status, f"answered {reply.status}: {reply.body[:200]!r}"
    error = reply.json()["error"]
    assert (error["rule"], error["field"]) == (rule, field), error
    assert served(gateway.upstreams[upstream]) == before, "the upstream was called"


def hole_stack(make_stack: StackFactory, tmp_path: Path) -> tuple[Any, ExtAuthzProcess, TestIssuer, int]:
    """The stack under ``failOpen: true``, once the bulk route serves a good body."""
    gateway, authz, issuer = start(make_stack, tmp_path, fail_open=True)
    good = BULK % b'"ok"'
    wait_for(lambda: send(gateway.listener_port, "/bulk", JSON, good).status == 200, 15, "the bulk route serves")
    return gateway, authz, issuer, served(gateway.upstreams["svc-b"])


def test_hole_a_json_body_sent_as_a_form_reaches_no_upstream(make_stack: StackFactory, tmp_path: Path) -> None:
    """Valid JSON, and as a form (what the upstream parses for this content-type) it has an
    ``isAdmin`` field the allowedFields guard never saw: 415 now, and the upstream is not called."""
    gateway, authz, issuer = start(make_stack, tmp_path)
    try:
        port = gateway.listener_port
        headers = {"authorization": f"Bearer {issuer.token('alice')}", "x-client-id": "client-0001", **JSON}
        wait_for(lambda: send(port, "/orders", headers, json.dumps(GOOD).encode()).status == 200, 15, "the validated route serves")
        before = served(gateway.upstreams["svc-a"])
        body = json.dumps({**GOOD, "items": [{"sku": "A&isAdmin=true&x=", "quantity": 1}]}).encode()
        assert dict(parse_qsl(body.decode()))["isAdmin"] == "true", "as a form, the body has an isAdmin field"
        for content_type in ("application/x-www-form-urlencoded", "text/plain", "application/json; charset=utf-16"):
            reply = send(port, "/orders", {**headers, "content-type": content_type}, body)
            refused_and_not_served(gateway, "svc-a", reply, before, 415, "contentType", "content-type")
            assert reply.json()["error"]["code"] == "unsupported_media_type" and content_type not in reply.body.decode()
        refused_and_not_served(gateway, "svc-a", send(port, "/orders", {k: v for k, v in headers.items() if k != "content-type"}, body),
                               before, 415, "contentType", "content-type")
        assert send(port, "/orders", {**headers, "content-type": "application/json; charset=UTF-8"}, body).status == 200
    finally:
        authz.stop()


def test_hole_two_content_type_lines_reach_no_upstream(make_stack: StackFactory, tmp_path: Path) -> None:
    """A form type and a JSON type in two header lines: the check must not validate the
    JSON reading while the upstream picks the form one."""
    gateway, authz, _, before = hole_stack(make_stack, tmp_path)
    try:
        for first, second in (("application/x-www-form-urlencoded", "application/json"), ("application/json", "application/x-www-form-urlencoded")):
            connection = http.client.HTTPConnection("127.0.0.1", gateway.listener_port, timeout=5)
            try:
                body = BULK % b'"a&isAdmin=true"'
                connection.putrequest("POST", "/bulk")
                for value in (first, second):
                    connection.putheader("content-type", value)
                connection.putheader("content-length", str(len(body)))
                connection.endheaders(body)
                response = connection.getresponse()
                reply = Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
            finally:
                connection.close()
            refused_and_not_served(gateway, "svc-b", reply, before, 415, "contentType", "content-type")
    finally:
        authz.stop()


def test_hole_a_duplicate_key_is_refused_not_its_last_copy_validated(make_stack: StackFactory, tmp_path: Path) -> None:
    """``quantity`` twice: Python validated the last (2), a first-wins upstream reads -5."""
    gateway, authz, _, before = hole_stack(make_stack, tmp_path)
    try:
        body = b'{"items": [{"sku": "ABC-1", "quantity": -5, "quantity": 2}]}'
        reply = send(gateway.listener_port, "/bulk", JSON, body)
        refused_and_not_served(gateway, "svc-b", reply, before, 400, "duplicate", "/items/0/quantity")
        error = {k: v for k, v in reply.json()["error"].items() if k != "request_id"}
        assert "-5" not in json.dumps(error), "the error echoes the value"
    finally:
        authz.stop()


def test_hole_a_number_of_4301_digits_is_refused_not_let_through_by_a_failed_check(make_stack: StackFactory, tmp_path: Path) -> None:
    """Python's int conversion limit raised: the check answered 500, and under failOpen the
    body reached the upstream unvalidated."""
    gateway, authz, _, before = hole_stack(make_stack, tmp_path)
    try:
        body = b'{"items": [{"sku": "ABC-1", "quantity": ' + b"9" * 4301 + b"}]}"
        refused_and_not_served(gateway, "svc-b", send(gateway.listener_port, "/bulk", JSON, body), before, 400, "number")
    finally:
        authz.stop()


def test_hole_a_body_nested_300_deep_is_refused_not_let_through_by_a_failed_check(make_stack: StackFactory, tmp_path: Path) -> None:
    """The validator's "Recursion limit reached" ValueError: a 500, passed under failOpen."""
    gateway, authz, _, before = hole_stack(make_stack, tmp_path)
    try:
        body = BULK % (b"[" * 300 + b"]" * 300)
        refused_and_not_served(gateway, "svc-b", send(gateway.listener_port, "/bulk", JSON, body), before, 400, "maxDepth")
    finally:
        authz.stop()


def test_hole_a_lone_surrogate_is_refused_not_let_through_by_a_failed_check(make_stack: StackFactory, tmp_path: Path) -> None:
    """``"\\ud800"``: each parser reads it its own way (Python keeps it, Go makes it U+FFFD,
    serde refuses it), and under a ``pattern`` the validator raised UnicodeEncodeError: a
    500, passed under failOpen."""
    gateway, authz, _, before = hole_stack(make_stack, tmp_path)
    try:
        body = BULK % b'"\\ud800"'
        refused_and_not_served(gateway, "svc-b", send(gateway.listener_port, "/bulk", JSON, body), before, 400, "json", "/note")
    finally:
        authz.stop()
