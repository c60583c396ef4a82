"""Route fields the schema accepts but the translator does not act on yet.

Saying so out loud matters: a route that asks for `auth` and silently gets none is a
security hole. `gatehouse validate` prints these as warnings and the control plane logs
them once per route version.
"""

from __future__ import annotations

from control_plane.model.route import Route

_NOT_YET = {
    "auth": "auth is not enforced: the control plane has no extAuthz configured (the route is NOT protected)",
    "rate_limits": "rateLimits are not enforced: the control plane has no rateLimit service configured",
}


def unenforced(route: Route, *, ext_authz: bool = False, rate_limit: bool = False) -> list[str]:
    """Warnings for fields this route sets explicitly that have no effect here."""
    spec = route.spec
    warnings = []
    for field in sorted(spec.model_fields_set & _NOT_YET.keys()):
        if field == "auth" and (not spec.auth.required or ext_authz):
            continue
        if field == "rate_limits" and rate_limit:
            continue
        warnings.append(_NOT_YET[field])
    return warnings
