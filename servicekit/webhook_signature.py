"""A Git host's webhook signature: ``X-Hub-Signature-256: sha256=<hex>``, HMAC-SHA256 of the
raw body with the shared secret (GitHub's scheme; Gitea and Forgejo send the same header).

Compared with ``hmac.compare_digest``; the secret never appears in an error or a log line.
"""

from __future__ import annotations

import hashlib
import hmac

PREFIX = "sha256="


class WebhookSignature:
    """Does a signature header sign this body with the secret?"""

    __slots__ = ("_key",)

    def __init__(self, secret: str) -> None:
        self._key = secret.encode()

    def sign(self, body: bytes) -> str:
        return PREFIX + hmac.new(self._key, body, hashlib.sha256).hexdigest()

    def verifies(self, body: bytes, header: str) -> bool:
        sent = header.strip()
        if not sent.lower().startswith(PREFIX):
            return False
        expected = self.sign(body)
        return hmac.compare_digest(sent[len(PREFIX) :].lower().encode("ascii", "replace"), expected[len(PREFIX) :].encode())
