"""Verified claims → upstream headers: the configured mapping, rendered values, and every
value that could smuggle bytes into a header dropped (and reported), never cleaned."""

from __future__ import annotations

from typing import Any

import pytest

from ext_authz.tokens.claim_headers import MAX_HEADER_VALUE, claim_headers
from ext_authz.config import Issuer
from servicekit.check_contract import IDENTITY_HEADERS

DEFAULT = {"x-user-id": "sub", "x-user-role": "role", "x-scope": "scope"}


def one(value: Any) -> tuple[dict[str, str], list[str]]:
    return claim_headers({"c": value}, {"x-c": "c"})


def test_the_default_mapping_comes_from_the_issuer_config() -> None:
    issuer = Issuer.model_validate({"issuer": "https://i/", "jwksFile": "k.json"})
    assert issuer.claim_headers == DEFAULT
    assert set(issuer.claim_headers) < set(IDENTITY_HEADERS), "every header a token fills is one the gateway strips from clients"
    headers, dropped = claim_headers({"sub": "alice", "role": "clerk", "scope": "a b", "email": "a@x"}, issuer.claim_headers)
    assert headers == {"x-user-id": "alice", "x-user-role": "clerk", "x-scope": "a b"}
    assert dropped == []


def test_a_configured_mapping_is_followed() -> None:
    issuer = Issuer.model_validate(
        {"issuer": "https://i/", "jwksFile": "k.json", "claimHeaders": {"x-tenant": "tid", "x-user-id": "email"}}
    )
    headers, dropped = claim_headers({"sub": "alice", "tid": "t-9", "email": "a@example.com", "role": "r"}, issuer.claim_headers)
    assert headers == {"x-tenant": "t-9", "x-user-id": "a@example.com"}
    assert dropped == []


def test_one_claim_may_feed_two_headers() -> None:
    headers, _ = claim_headers({"sub": "alice"}, {"x-user-id": "sub", "x-subject": "sub"})
    assert headers == {"x-user-id": "alice", "x-subject": "alice"}


def test_missing_claims_are_skipped_not_reported() -> None:
    headers, dropped = claim_headers({"sub": "alice"}, DEFAULT)
    assert headers == {"x-user-id": "alice"}
    assert dropped == []
    assert claim_headers({}, DEFAULT) == ({}, [])
    assert claim_headers({"sub": "alice"}, {}) == ({}, [])


# --- rendering ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("alice", "alice"),
        ("", ""),
        (["admin", "clerk"], "admin clerk"),
        (("a", "b", "c"), "a b c"),
        ([], ""),
        (42, "42"),
        (-1, "-1"),
        (0, "0"),
        (2.5, "2.5"),
        (True, "true"),
        (False, "false"),
        ("tab\tinside", "tab\tinside"),
        ("caf\u00e9 \u4e2d", "caf\u00e9 \u4e2d"),
        ("x" * MAX_HEADER_VALUE, "x" * MAX_HEADER_VALUE),
    ],
    ids=[
        "str", "empty-str", "list", "tuple", "empty-list", "int", "negative", "zero", "float",
        "true", "false", "tab", "non-ascii", "at-limit",
    ],
)
def test_values_are_rendered(value: Any, text: str) -> None:
    assert one(value) == ({"x-c": text}, [])


def test_bool_is_not_rendered_as_an_int() -> None:
    headers, _ = one(True)
    assert headers["x-c"] != "1" and headers["x-c"] != "True"


# --- unsafe values: dropped and reported -------------------------------------------------------

CONTROL = [chr(c) for c in range(0x20) if c != 0x09] + ["\x7f"]


@pytest.mark.parametrize("char", CONTROL, ids=[f"0x{ord(c):02x}" for c in CONTROL])
@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_a_control_character_drops_the_claim(char: str, where: str) -> None:
    value = {"start": char + "alice", "middle": "ali" + char + "ce", "end": "alice" + char}[where]
    headers, dropped = claim_headers({"sub": value, "role": "clerk"}, DEFAULT)
    assert headers == {"x-user-role": "clerk"}, "the unsafe claim is dropped, not cleaned; the others stay"
    assert dropped == ["sub"]


@pytest.mark.parametrize(
    "value",
    ["alice\r\nx-user-role: admin", "alice\nx", "alice\rx", "alice\x00", ["ok", "bad\r\nx-evil: 1"], ["ok", "\x7f"]],
    ids=["crlf-injection", "lf", "cr", "nul", "list-crlf", "list-del"],
)
def test_header_injection_attempts_are_dropped(value: Any) -> None:
    headers, dropped = claim_headers({"sub": "alice", "role": value}, DEFAULT)
    assert headers == {"x-user-id": "alice"}
    assert dropped == ["role"]
    assert not any("\r" in v or "\n" in v for v in headers.values())


def test_an_oversized_value_is_dropped() -> None:
    assert one("x" * (MAX_HEADER_VALUE + 1)) == ({}, ["c"])
    # A list whose joined form is too long, though every item is short.
    items = ["abcdefghij"] * (MAX_HEADER_VALUE // 10 + 1)
    assert len(" ".join(items)) > MAX_HEADER_VALUE
    assert one(items) == ({}, ["c"])


@pytest.mark.parametrize(
    "value",
    [
        {"admin": True},
        {},
        ["admin", 1],
        ["admin", None],
        ["admin", ["nested"]],
        ["admin", {"k": "v"}],
        [True],
        None,
    ],
    ids=["dict", "empty-dict", "list-int", "list-none", "list-list", "list-dict", "list-bool", "null"],
)
def test_values_that_are_not_text_are_dropped(value: Any) -> None:
    headers, dropped = claim_headers({"sub": "alice", "role": value}, DEFAULT)
    assert headers == {"x-user-id": "alice"}, "no partial rendering of a structured claim"
    assert dropped == ["role"]


def test_every_dropped_claim_is_reported_once_in_mapping_order() -> None:
    claims = {"sub": "a\nb", "role": {"x": 1}, "scope": "ok", "tid": "t\x00"}
    mapping = {"x-user-id": "sub", "x-user-role": "role", "x-scope": "scope", "x-tenant": "tid"}
    headers, dropped = claim_headers(claims, mapping)
    assert headers == {"x-scope": "ok"}
    assert dropped == ["sub", "role", "tid"]


def test_dropped_names_are_claim_names_never_values() -> None:
    _, dropped = claim_headers({"sub": "secret-value\r\n"}, DEFAULT)
    assert dropped == ["sub"]
    assert not any("secret-value" in name for name in dropped)


C1_CONTROLS = ["\x85", "\x9b", "\x80", "\x9f"]


@pytest.mark.parametrize("char", C1_CONTROLS, ids=[f"U+{ord(c):04X}" for c in C1_CONTROLS])
def test_c1_control_characters_are_dropped(char: str) -> None:
    assert one("alice" + char + "x-user-role: admin") == ({}, ["c"])
