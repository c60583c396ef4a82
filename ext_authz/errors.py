"""The ext_authz exception tree: every error this package raises on purpose is one of these.

    ExtAuthzError                   the root; ``str()`` is safe to log
     ├── AuthzError                 deny; ``status`` and ``error`` go to the client
     │    ├── TokenError            401 invalid_token: missing, malformed, bad signature, expired...
     │    │    └── RevokedError     401 invalid_token: the token's jti is revoked
     │    ├── ApiKeyError           401 invalid_key: an API key missing, malformed or unknown (api_keys.py)
     │    ├── ForbiddenError        403 insufficient_scope: valid token, not allowed here (or blocked)
     │    │    └── ConsumerForbidden 403: an API key's consumer not let in (api_keys.py)
     │    └── UnavailableError      503: no keys or no revocation data, under a fail-closed policy
     ├── JwksFetchError             an issuer's JWKS could not be fetched or used (``source``: URL
     │                              or file; ``reason``); the keys already held are kept
     ├── StoreUnavailable           the revocation store (Redis) did not answer (``operation``,
     │                              ``reason``); always transient
     ├── InvalidEntry               ValueError too: an admin input refused (``field``, ``reason``;
     │                              never the value)
     ├── CredentialError            ValueError too: the admin credential, or its file, is unusable
     │                              (``origin``: the file or variable; ``reason``)
     ├── SigningKeyError            ValueError too: token swap's signing key file is unusable
     │                              (the file and why, never the key; swap/signer.py)
     └── ExchangeFailed             an RFC 8693 exchange gave no usable token (the URL and
                                    ``reason``; swap/exchange.py); the client gets 503

``reason`` is a short machine code for logs and metrics (``expired``, ``bad_signature``,
``timeout``...), except on InvalidEntry and CredentialError, where it is the rule broken,
in words (``must not be empty``). A denial's ``message`` is safe to show: it never contains
the token, a claim value or a key.

Lower-level errors (redis, aiohttp, OSError, JSON, PyJWT) become one of these in
``error_mapping.py``, and nowhere else.
"""

from __future__ import annotations


class ExtAuthzError(Exception):
    """The root of the tree."""


class AuthzError(ExtAuthzError):
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


class JwksFetchError(ExtAuthzError):
    """A JWKS fetch failed; the message is safe to log (status, error type, never a body).

    ``source`` is the URL or file fetched (None when not known where it was raised);
    ``reason`` a short code: ``http_status``, ``too_large``, ``timeout``, ``connection``,
    ``not_json``, ``unreadable``, ``no_usable_key`` (``error`` otherwise).
    """

    def __init__(self, message: str, *, source: str | None = None, reason: str = "error") -> None:
        super().__init__(message)
        self.message = message
        self.source = source
        self.reason = reason


class StoreUnavailable(ExtAuthzError):
    """Redis could not be reached or did not answer in time (always transient).

    ``operation``: what was being done (``subscribe``, ``receive``, ``ping``, ``heartbeat``,
    ``scan``, ``revoke``, ``block``, ``unblock``; None when not known); ``reason``:
    ``timeout``, ``connection``, ``redis_error`` or ``no_pong`` (``error`` otherwise).
    """

    transient = True

    def __init__(self, message: str, *, operation: str | None = None, reason: str = "error") -> None:
        super().__init__(message)
        self.message = message
        self.operation = operation
        self.reason = reason


class InvalidEntry(ExtAuthzError, ValueError):
    """A jti, subject, expiry or reason the admin side refuses; ``str()`` names the field, never the value."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class CredentialError(ExtAuthzError, ValueError):
    """The admin credential (file) is unusable; ``str()`` names where it came from, never the credential."""

    def __init__(self, origin: str, reason: str) -> None:
        super().__init__(f"{origin}: {reason}")
        self.origin = origin
        self.reason = reason


class SigningKeyError(ExtAuthzError, ValueError):
    """The signing key file is unusable; ``str()`` names the file and why, never the key."""


class ExchangeFailed(ExtAuthzError):
    """The exchange gave no usable token; ``str()`` is safe to log (the URL and the reason)."""

    def __init__(self, url: str, reason: str, detail: str) -> None:
        super().__init__(f"{url}: {reason}: {detail}")
        self.reason = reason


class ApiKeyError(AuthzError):
    """401 invalid_key: an API key missing, malformed or unknown (or revoked); ``api_keys.py``."""

    error = "invalid_key"


class ConsumerForbidden(ForbiddenError):
    """403: a known API key whose consumer the route does not let in."""
