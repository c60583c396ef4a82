"""What the revocation admin side accepts: jtis and subjects, expiries, audit reasons.

Every rule raises ``InvalidEntry(field, reason)``, whose message names the field and the
rule, never the value (the admin API answers it as INVALID_ARGUMENT). The mirror applies
the identifier and expiry rules to every write (``RevocationMirror.revoke``/``block``/
``unblock``); the admin API checks the reason before it writes.
"""

from __future__ import annotations

import math
import unicodedata

from ext_authz.errors import InvalidEntry

__all__ = [
    "MAX_AHEAD_SECONDS",
    "MAX_IDENTIFIER_CHARS",
    "MAX_REASON_CHARS",
    "printable",
    "validate_expiry",
    "validate_identifier",
    "validate_reason",
]

MAX_IDENTIFIER_CHARS = 256
MAX_AHEAD_SECONDS = 365 * 86_400
"""Revocations and blocks with an expiry end at most a year ahead."""
MAX_REASON_CHARS = 256
_FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def validate_identifier(field: str, value: str) -> str:
    """A jti or subject: non-empty, at most 256 characters, no control characters."""
    if not value:
        raise InvalidEntry(field, "must not be empty")
    if len(value) > MAX_IDENTIFIER_CHARS:
        raise InvalidEntry(field, f"longer than {MAX_IDENTIFIER_CHARS} characters")
    if any(unicodedata.category(c) in _FORBIDDEN_CATEGORIES for c in value):
        raise InvalidEntry(field, "contains control characters")
    return value


def validate_expiry(field: str, at: float, now: float) -> float:
    """An expiry (Unix seconds): in the future and at most a year ahead."""
    if not math.isfinite(at) or at <= now:
        raise InvalidEntry(field, "must be in the future")
    if at > now + MAX_AHEAD_SECONDS:
        raise InvalidEntry(field, "must be at most one year ahead")
    return at


def printable(value: str, limit: int) -> bool:
    """At most ``limit`` characters, none of Unicode's "other" (C*) categories."""
    return len(value) <= limit and not any(unicodedata.category(c).startswith("C") for c in value)


def validate_reason(reason: str) -> str:
    """Why an operator made a change (for the audit trail): empty, or at most 256 printable characters."""
    if reason and not printable(reason, MAX_REASON_CHARS):
        raise InvalidEntry("reason", f"at most {MAX_REASON_CHARS} printable characters")
    return reason
