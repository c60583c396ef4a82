"""The ext_authz exception tree: every denial is one of these, with what the client may see.

    AuthzError                      deny; ``status`` and ``error`` go to the client
     ├── TokenError                 401 invalid_token: missing, malformed, bad signature, expired...
     │    └── RevokedError          401 invalid_token: the token's jti is revoked
     ├── ForbiddenError             403 insufficient_scope: valid token, not allowed here (or blocked)
     └── UnavailableError           503: no keys or no revocation data, under a fail-closed policy

``reason`` is a short machine code for logs and metrics (``expired``, ``bad_signature``,
``alg_not_allowed``...). ``message`` is safe to show: it never contains the token, a
claim value or a key.
"""

from __future__ import annotations


class AuthzError(Exception):
    status = 401
    error = "invalid_token"

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message
        self.subject: str | None = None
        self.jti: str | None = None
        """Set only once the token was verified: for the audit trail, never from unverified input."""


class TokenError(AuthzError):
    """The token is missing or unacceptable."""


class RevokedError(TokenError):
    """The token was revoked (its jti is on the blacklist)."""


class ForbiddenError(AuthzError):
    status = 403
    error = "insufficient_scope"


class UnavailableError(AuthzError):
    """Deny on purpose: what a decision needs (keys, revocation data) is not available."""

    status = 503
    error = "temporarily_unavailable"
