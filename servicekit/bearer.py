"""A shared bearer credential between two Gatehouse processes (telemetry → control plane),
or between an operator and one (the control plane's admin port).

The credential comes from a file (a mounted Secret), is compared by SHA-256 digest with
``hmac.compare_digest``, and never appears in an error, a log line or a response. A
browser cannot send a bearer credential it was never given, so a read a person makes
from a browser may carry it as the password of HTTP Basic (``allows_basic``): the browser
asks for it once per origin. Never for a write: a browser replays Basic credentials on its
own, which is what a cross-site request forgery needs.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from pathlib import Path

MIN_CREDENTIAL_CHARS = 16


class BearerCredentialError(ValueError):
    """The credential file is unusable; ``str()`` names the file and why, never its content."""


def read_bearer_credential(path: Path) -> str:
    """The credential in ``path`` (surrounding whitespace ignored)."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise BearerCredentialError(f"{path}: cannot read the credential ({reason})") from None
    if len(text) < MIN_CREDENTIAL_CHARS:
        raise BearerCredentialError(f"{path}: the credential must be at least {MIN_CREDENTIAL_CHARS} characters")
    if not all(33 <= ord(c) < 127 for c in text):
        raise BearerCredentialError(f"{path}: the credential must be printable ASCII without spaces")
    return text


class BearerCheck:
    """Does an ``Authorization`` header carry the credential? Constant time in its content."""

    __slots__ = ("_digest",)

    def __init__(self, credential: str) -> None:
        self._digest = hashlib.sha256(credential.encode()).digest()

    def allows(self, header: str | None) -> bool:
        if not header:
            return False
        scheme, _, sent = header.partition(" ")
        if scheme.lower() != "bearer":
            return False
        digest = hashlib.sha256(sent.strip().encode("utf-8", "replace")).digest()
        return hmac.compare_digest(digest, self._digest)

    def allows_basic(self, header: str | None) -> bool:
        """Does an ``Authorization: Basic`` header carry the credential as its password (any user)?"""
        if not header:
            return False
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        password = decoded.partition(b":")[2]
        return hmac.compare_digest(hashlib.sha256(password).digest(), self._digest)
