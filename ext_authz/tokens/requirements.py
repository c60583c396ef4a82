"""A route's requirements (from ext_authz context_extensions) against a verified token.

The control plane puts ``audiences``, ``scopes`` and ``roles`` on each authenticated
route as space-separated lists. A token passes when it has one of the audiences, all of
the scopes, and one of the roles, each that is required.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ext_authz.errors import ForbiddenError


def _as_set(value: Any) -> set[str]:
    if isinstance(value, str):
        return set(value.split())
    if isinstance(value, (list, tuple)):
        return {item for item in value if isinstance(item, str)}
    return set()


def granted_scopes(claims: Mapping[str, Any]) -> set[str]:
    """RFC 8693 `scope` (space-separated), or the common `scp` list."""
    return _as_set(claims.get("scope")) | _as_set(claims.get("scp"))


def granted_roles(claims: Mapping[str, Any]) -> set[str]:
    return _as_set(claims.get("role")) | _as_set(claims.get("roles"))


def check_requirements(claims: Mapping[str, Any], extensions: Mapping[str, str]) -> None:
    audiences = extensions.get("audiences")
    if audiences and not (_as_set(claims.get("aud")) & set(audiences.split())):
        raise ForbiddenError("audience", "the token is not meant for this route")
    scopes = extensions.get("scopes")
    if scopes:
        missing = set(scopes.split()) - granted_scopes(claims)
        if missing:
            raise ForbiddenError("scope", "the token lacks a required scope: " + " ".join(sorted(missing)))
    roles = extensions.get("roles")
    if roles and not (granted_roles(claims) & set(roles.split())):
        raise ForbiddenError("role", "the token has none of the roles this route allows")
