"""CheckResponses: OK with the identity headers (overwriting client copies), or an RFC 6750
denial with a JSON body made only of the error's safe fields."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.auth.v3 import external_auth_pb2
from google.rpc import code_pb2

from ext_authz.errors import AuthzError, ForbiddenError, RevokedError, TokenError, UnavailableError
from ext_authz.responses import allowed, denied

OVERWRITE = base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
# RFC 6750 §3: error and error_description values are %x20-21 / %x23-5B / %x5D-7E.
RFC6750_VALUE = re.compile(r'[\x20\x21\x23-\x5b\x5d-\x7e]*')
CHALLENGE = re.compile(r'^Bearer realm="gatehouse", error="([^"]*)", error_description="([^"]*)"$')


def headers_of(options: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for option in options:
        assert option.header.key not in out, f"duplicate header {option.header.key}"
        out[option.header.key] = option.header.value
    return out


def body_of(response: external_auth_pb2.CheckResponse) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(response.denied_response.body)
    return data


# --- allowed ------------------------------------------------------------------------------------


def test_allowed_sets_each_header_overwriting_client_copies() -> None:
    response = allowed({"x-user-id": "alice", "x-user-role": "clerk", "x-scope": "a b"})
    assert response.status.code == code_pb2.OK
    assert response.WhichOneof("http_response") == "ok_response"
    options = list(response.ok_response.headers)
    assert [(o.header.key, o.header.value) for o in options] == [
        ("x-user-id", "alice"), ("x-user-role", "clerk"), ("x-scope", "a b")
    ]
    for option in options:
        assert option.append_action == OVERWRITE
        assert option.keep_empty_value is True
        assert not option.HasField("append"), "the deprecated append flag must not be used alongside append_action"
    assert not response.ok_response.headers_to_remove
    assert not response.ok_response.response_headers_to_add


def test_allowed_keeps_an_empty_value_rather_than_letting_a_client_copy_through() -> None:
    response = allowed({"x-user-role": ""})
    [option] = response.ok_response.headers
    assert (option.header.key, option.header.value, option.keep_empty_value) == ("x-user-role", "", True)


def test_allowed_with_no_identity_is_still_ok() -> None:
    response = allowed({})
    assert response.status.code == code_pb2.OK
    assert response.HasField("ok_response") and not response.ok_response.headers


def test_allowed_round_trips_through_the_wire() -> None:
    response = allowed({"x-user-id": "alice"})
    again = external_auth_pb2.CheckResponse.FromString(response.SerializeToString())
    assert again == response


# --- denied: status, gRPC code, challenge ------------------------------------------------------

CASES = [
    (TokenError("missing", "no Authorization header"), 401, code_pb2.UNAUTHENTICATED, "invalid_token"),
    (TokenError("expired", "the token has expired"), 401, code_pb2.UNAUTHENTICATED, "invalid_token"),
    (RevokedError("revoked", "the token has been revoked"), 401, code_pb2.UNAUTHENTICATED, "invalid_token"),
    (ForbiddenError("scope", "the token lacks a required scope: a b"), 403, code_pb2.PERMISSION_DENIED, "insufficient_scope"),
    (ForbiddenError("blocked", "the account is blocked"), 403, code_pb2.PERMISSION_DENIED, "insufficient_scope"),
    (UnavailableError("no_keys", "no usable signing keys"), 503, code_pb2.UNAVAILABLE, "temporarily_unavailable"),
    (
        UnavailableError("revocation_unavailable", "revocation data is temporarily unavailable"),
        503, code_pb2.UNAVAILABLE, "temporarily_unavailable",
    ),
]
IDS = ["missing", "expired", "revoked", "scope", "blocked", "no-keys", "revocation"]


@pytest.mark.parametrize(("error", "status", "grpc_code", "code"), CASES, ids=IDS)
def test_denied_status_code_and_body(error: AuthzError, status: int, grpc_code: int, code: str) -> None:
    response = denied(error, "req-42")
    assert response.WhichOneof("http_response") == "denied_response"
    assert response.status.code == grpc_code
    assert response.denied_response.status.code == status
    assert body_of(response) == {
        "error": {"code": code, "reason": error.reason, "message": error.message, "request_id": "req-42"}
    }
    headers = headers_of(response.denied_response.headers)
    assert headers["content-type"] == "application/json"
    assert headers["cache-control"] == "no-store"
    for option in response.denied_response.headers:
        assert option.append_action == OVERWRITE


@pytest.mark.parametrize(("error", "status", "grpc_code", "code"), CASES, ids=IDS)
def test_challenge_per_rfc6750(error: AuthzError, status: int, grpc_code: int, code: str) -> None:
    headers = headers_of(denied(error, "r").denied_response.headers)
    if status == 503:
        assert "www-authenticate" not in headers, "a 503 is not an authentication challenge"
        assert headers["retry-after"] == "1"
        return
    assert "retry-after" not in headers
    match = CHALLENGE.fullmatch(headers["www-authenticate"])
    assert match, headers["www-authenticate"]
    assert match.group(1) == code
    assert match.group(2) == error.message
    assert RFC6750_VALUE.fullmatch(match.group(2))


@pytest.mark.parametrize(
    ("message", "description"),
    [
        ('a "quoted" word', "a 'quoted' word"),
        ('trailing backslash \\', "trailing backslash "),
        ('escape \\" attempt', "escape ' attempt"),
        ('", error="evil', "', error='evil"),
    ],
    ids=["quotes", "backslash", "escaped-quote", "param-injection"],
)
def test_the_description_cannot_break_out_of_its_quotes(message: str, description: str) -> None:
    error = ForbiddenError("scope", message)
    header = headers_of(denied(error, "r").denied_response.headers)["www-authenticate"]
    match = CHALLENGE.fullmatch(header)
    assert match, header
    assert match.group(1) == "insufficient_scope", "the error parameter cannot be overridden"
    assert match.group(2) == description
    assert RFC6750_VALUE.fullmatch(match.group(2))
    assert header.count('"') == 6
    # The JSON body keeps the message as it was: JSON escaping is safe on its own.
    assert body_of(denied(error, "r"))["error"]["message"] == message


def test_the_request_id_is_json_escaped_not_interpolated() -> None:
    request_id = 'abc","reason":"ok'
    response = denied(TokenError("missing", "no Authorization header"), request_id)
    body = body_of(response)
    assert body["error"]["request_id"] == request_id
    assert body["error"]["reason"] == "missing"
    assert set(body) == {"error"} and set(body["error"]) == {"code", "reason", "message", "request_id"}


def test_an_empty_request_id_is_kept_as_empty() -> None:
    assert body_of(denied(TokenError("missing", "m"), ""))["error"]["request_id"] == ""


def test_the_body_carries_only_the_errors_safe_fields() -> None:
    """subject and jti are for the audit trail; the client never sees them, nor the exception text."""
    error = RevokedError("revoked", "the token has been revoked")
    error.subject, error.jti = "subject-secret-1", "jti-secret-2"
    response = denied(error, "req-1")
    raw = response.denied_response.body
    assert "subject-secret-1" not in raw and "jti-secret-2" not in raw
    for option in response.denied_response.headers:
        assert "subject-secret-1" not in option.header.value and "jti-secret-2" not in option.header.value
    assert body_of(response) == {
        "error": {"code": "invalid_token", "reason": "revoked", "message": "the token has been revoked", "request_id": "req-1"}
    }


def test_the_body_is_compact_json() -> None:
    raw = denied(TokenError("missing", "m"), "r").denied_response.body
    assert raw == '{"error":{"code":"invalid_token","reason":"missing","message":"m","request_id":"r"}}'


def test_an_unknown_status_falls_back_to_permission_denied() -> None:
    class Teapot(AuthzError):
        status = 418
        error = "teapot"

    response = denied(Teapot("x", "y"), "r")
    assert response.status.code == code_pb2.PERMISSION_DENIED
    assert response.denied_response.status.code == 418
    assert "www-authenticate" not in headers_of(response.denied_response.headers)
