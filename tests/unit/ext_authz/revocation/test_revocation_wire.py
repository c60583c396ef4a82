"""The Redis layout and pub/sub messages; input validation for the admin side."""

from __future__ import annotations

import json

import pytest

from ext_authz.admin.inputs import validate_expiry, validate_identifier
from ext_authz.errors import InvalidEntry
from ext_authz.revocation.entries import Change, Entry
from ext_authz.revocation.store import Keys, decode_change, encode_change

T = 1_700_000_000.0


def test_key_layout() -> None:
    keys = Keys("gatehouse:")
    assert keys.key("jti", "abc") == "gatehouse:revoked:jti:abc"
    assert keys.key("sub", "user-1") == "gatehouse:blocked:sub:user-1"
    assert keys.channel == "gatehouse:revocations"
    assert keys.pattern("jti") == "gatehouse:revoked:jti:*"


def test_scan_pattern_escapes_glob_characters_in_the_prefix() -> None:
    assert Keys("t[1]*?\\:").pattern("sub") == "t\\[1\\]\\*\\?\\\\:blocked:sub:*"


@pytest.mark.parametrize(
    ("change", "wire"),
    [
        (Change("revoke", Entry("jti", "j1", T)), {"op": "revoke", "jti": "j1", "exp": T}),
        (Change("block", Entry("sub", "alice", T)), {"op": "block", "sub": "alice", "until": T}),
        (Change("block", Entry("sub", "alice", None)), {"op": "block", "sub": "alice", "until": None}),
        (Change("unblock", Entry("sub", "alice", None)), {"op": "unblock", "sub": "alice"}),
    ],
)
def test_messages_round_trip(change: Change, wire: dict[str, object]) -> None:
    encoded = encode_change(change)
    assert json.loads(encoded) == wire
    assert decode_change(encoded) == change
    assert decode_change(encoded.encode()) == change


@pytest.mark.parametrize(
    "raw",
    [
        "not json",
        "[]",
        '{"op": "nuke"}',
        '{"op": "revoke", "jti": "j1"}',
        '{"op": "revoke", "jti": "", "exp": 1}',
        '{"op": "revoke", "jti": "j1", "exp": "soon"}',
        '{"op": "revoke", "jti": "j1", "exp": true}',
        '{"op": "revoke", "jti": "j1", "exp": NaN}',
        '{"op": "block", "sub": 5, "until": null}',
        '{"op": "unblock"}',
    ],
)
def test_malformed_messages_are_rejected(raw: str) -> None:
    with pytest.raises(ValueError):
        decode_change(raw)


@pytest.mark.parametrize("value", ["j1", "a" * 256, "user@example.com", "ünïcode", "with space"])
def test_identifiers_accepted(value: str) -> None:
    assert validate_identifier("jti", value) == value


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("", "must not be empty"),
        ("a" * 257, "longer than 256 characters"),
        ("a\nb", "contains control characters"),
        ("a\x00", "contains control characters"),
        ("a\x7f", "contains control characters"),
        ("a\u202eb", "contains control characters"),  # bidi override (format character)
        ("a\u2028b", "contains control characters"),  # line separator
    ],
)
def test_identifiers_refused(value: str, reason: str) -> None:
    with pytest.raises(InvalidEntry) as caught:
        validate_identifier("subject", value)
    assert caught.value.field == "subject"
    assert caught.value.reason == reason
    assert value not in str(caught.value) or not value


def test_expiry_rules() -> None:
    assert validate_expiry("expires_at", T + 1, T) == T + 1
    assert validate_expiry("expires_at", T + 365 * 86400, T) == T + 365 * 86400
    for bad, reason in [
        (T, "must be in the future"),
        (T - 1, "must be in the future"),
        (float("nan"), "must be in the future"),
        (T + 365 * 86400 + 1, "must be at most one year ahead"),
    ]:
        with pytest.raises(InvalidEntry, match=reason):
            validate_expiry("expires_at", bad, T)
