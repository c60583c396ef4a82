"""Per-route requirements (ext_authz context_extensions) against verified claims: one of the
audiences, all of the scopes, one of the roles; and no denial message carries a claim value."""

from __future__ import annotations

from typing import Any

import pytest

from ext_authz.errors import AuthzError, ForbiddenError
from ext_authz.tokens.requirements import check_requirements, granted_roles, granted_scopes

# Claim values that must never appear in a message (the route's required names may).
SECRET_CLAIMS: dict[str, Any] = {
    "sub": "subject-7f3a",
    "aud": ["aud-private-1", "aud-private-2"],
    "scope": "scope-private-a scope-private-b",
    "scp": ["scp-private-c"],
    "role": "role-private-x",
    "roles": ["role-private-y"],
}
SECRET_VALUES = ("subject-7f3a", "aud-private", "scope-private", "scp-private", "role-private")


def forbidden(claims: dict[str, Any], extensions: dict[str, str]) -> ForbiddenError:
    with pytest.raises(ForbiddenError) as info:
        check_requirements(claims, extensions)
    exc = info.value
    assert (exc.status, exc.error) == (403, "insufficient_scope")
    text = f"{exc} {exc.message} {exc.args}"
    for value in SECRET_VALUES:
        assert value not in text, f"a claim value leaked into the denial: {text!r}"
    return exc


# --- empty requirements ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "extensions",
    [{}, {"route": "shop/orders"}, {"route": "r", "audiences": "", "scopes": "", "roles": ""}],
    ids=["nothing", "route-only", "empty-values"],
)
@pytest.mark.parametrize("claims", [{}, SECRET_CLAIMS], ids=["no-claims", "claims"])
def test_no_requirements_pass_any_token(extensions: dict[str, str], claims: dict[str, Any]) -> None:
    check_requirements(claims, extensions)  # raises on failure


# --- audiences: one must match ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("aud", "required"),
    [
        ("api", "api"),
        ("api", "other api"),
        (["x", "api"], "api"),
        (["x", "api"], "y api z"),
        (["api"], "api"),
    ],
)
def test_an_audience_matches(aud: Any, required: str) -> None:
    check_requirements({"aud": aud}, {"audiences": required})


@pytest.mark.parametrize(
    "aud",
    [None, "", "apix", "API", ["x", "y"], [], [1, 2], {"api": True}, 42, ["ap", "i"]],
    ids=["missing", "empty", "prefix", "case", "list-miss", "empty-list", "ints", "dict", "number", "split"],
)
def test_an_audience_that_does_not_match_is_forbidden(aud: Any) -> None:
    claims = dict(SECRET_CLAIMS)
    if aud is None:
        del claims["aud"]
    else:
        claims["aud"] = aud
    exc = forbidden(claims, {"audiences": "api"})
    assert exc.reason == "audience"
    assert exc.message == "the token is not meant for this route"


def test_a_list_audience_with_non_string_items_still_matches_on_its_strings() -> None:
    check_requirements({"aud": [1, None, "api"]}, {"audiences": "api"})


# --- scopes: all required --------------------------------------------------------------------


@pytest.mark.parametrize(
    "claims",
    [
        {"scope": "orders:read orders:write"},
        {"scope": "orders:write  orders:read extra"},
        {"scp": ["orders:read", "orders:write"]},
        {"scope": "orders:read", "scp": ["orders:write"]},
    ],
    ids=["scope", "scope-extra-spaces", "scp", "both"],
)
def test_all_required_scopes_present_pass(claims: dict[str, Any]) -> None:
    check_requirements(claims, {"scopes": "orders:read orders:write"})


@pytest.mark.parametrize(
    ("claims", "missing"),
    [
        ({}, "orders:read orders:write"),
        ({"scope": "orders:read"}, "orders:write"),
        ({"scp": ["orders:write"]}, "orders:read"),
        ({"scope": "orders:readorders:write"}, "orders:read orders:write"),
        ({"scope": "ORDERS:READ ORDERS:WRITE"}, "orders:read orders:write"),
        ({"scp": [["orders:read"], {"orders:write": 1}]}, "orders:read orders:write"),
        ({"scope": 7}, "orders:read orders:write"),
    ],
    ids=["none", "one-missing-scope", "one-missing-scp", "glued", "case", "nested", "number"],
)
def test_a_missing_scope_is_forbidden_and_named(claims: dict[str, Any], missing: str) -> None:
    exc = forbidden({**claims, "sub": "subject-7f3a"}, {"scopes": "orders:write orders:read"})
    assert exc.reason == "scope"
    # The message names only what the route requires and the token lacks, sorted.
    assert exc.message == "the token lacks a required scope: " + missing


def test_a_scope_denial_names_required_scopes_never_granted_ones() -> None:
    exc = forbidden(SECRET_CLAIMS, {"scopes": "orders:read"})
    assert exc.message.endswith(": orders:read")


# --- roles: one must match -------------------------------------------------------------------


@pytest.mark.parametrize(
    "claims",
    [{"role": "admin"}, {"roles": ["clerk", "admin"]}, {"role": "clerk admin"}, {"role": "x", "roles": ["support"]}],
    ids=["role", "roles", "role-space-list", "either"],
)
def test_one_allowed_role_passes(claims: dict[str, Any]) -> None:
    check_requirements(claims, {"roles": "admin support"})


@pytest.mark.parametrize(
    "claims",
    [{}, {"role": "clerk"}, {"roles": ["clerk", "viewer"]}, {"role": "Admin"}, {"roles": [1, True]}, {"role": {"admin": 1}}],
    ids=["none", "role", "roles", "case", "non-strings", "dict"],
)
def test_no_allowed_role_is_forbidden(claims: dict[str, Any]) -> None:
    exc = forbidden({**SECRET_CLAIMS, "role": None, "roles": None, **claims}, {"roles": "admin support"})
    assert exc.reason == "role"
    assert exc.message == "the token has none of the roles this route allows"


# --- combined, and the order of the checks ---------------------------------------------------


def test_every_kind_of_requirement_together() -> None:
    claims = {"aud": ["web", "api"], "scope": "a b c", "roles": ["admin"]}
    check_requirements(claims, {"route": "r", "audiences": "api", "scopes": "a c", "roles": "admin"})


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        ({"aud": "x", "scope": "", "roles": []}, "audience"),
        ({"aud": "api", "scope": "", "roles": []}, "scope"),
        ({"aud": "api", "scope": "a", "roles": []}, "role"),
    ],
)
def test_the_first_failed_requirement_is_reported(claims: dict[str, Any], reason: str) -> None:
    assert forbidden(claims, {"audiences": "api", "scopes": "a", "roles": "admin"}).reason == reason


def test_forbidden_is_an_authz_error() -> None:
    exc = forbidden({}, {"roles": "admin"})
    assert isinstance(exc, AuthzError)
    assert exc.subject is None and exc.jti is None, "the service fills these in, not the requirement check"


# --- the helpers -----------------------------------------------------------------------------


def test_granted_scopes_merges_scope_and_scp() -> None:
    assert granted_scopes({"scope": "a b", "scp": ["c", 3, "a"]}) == {"a", "b", "c"}
    assert granted_scopes({"scope": None, "scp": "d e"}) == {"d", "e"}
    assert granted_scopes({}) == set()


def test_granted_roles_merges_role_and_roles() -> None:
    assert granted_roles({"role": "a", "roles": ["b", None]}) == {"a", "b"}
    assert granted_roles({"role": ["c"], "roles": "d e"}) == {"c", "d", "e"}
    assert granted_roles({"role": 5}) == set()
