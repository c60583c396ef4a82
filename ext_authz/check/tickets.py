"""Waiting-room tickets: ``<id>.<mac>``, an id Redis knows and an HMAC-SHA256 that binds
it to one route. Opaque and unguessable: the id is 128 random bits, and without the key
no one can make a ticket, or move one to another route. Every instance of ext_authz
holds the same key (a file; a Secret in the chart), so a ticket opened by one is honoured
by every other.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from pathlib import Path

MIN_KEY_BYTES = 32
_ID_CHARS = 22
"""16 random bytes, base64url without padding."""
_MAC_BYTES = 16
_MAC_CHARS = 22
_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def read_key(path: Path) -> bytes:
    """The key file's bytes, surrounding whitespace removed; ValueError naming the file if short."""
    try:
        key = path.read_bytes().strip()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the waiting-room ticket key ({exc.strerror})") from exc
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"{path}: the waiting-room ticket key must be at least {MIN_KEY_BYTES} bytes, it has {len(key)}")
    return key


class TicketSigner:
    def __init__(self, key: bytes) -> None:
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(f"the waiting-room ticket key must be at least {MIN_KEY_BYTES} bytes")
        self._key = key

    def _mac(self, route: str, ticket_id: str) -> str:
        message = f"gatehouse-wr1\n{route}\n{ticket_id}".encode()
        return _b64(hmac.new(self._key, message, hashlib.sha256).digest()[:_MAC_BYTES])

    @staticmethod
    def new_id() -> str:
        """A fresh ticket id (signed only if the client is told to wait: ``sign``)."""
        return _b64(secrets.token_bytes(16))

    def issue(self, route: str) -> tuple[str, str]:
        """A fresh (ticket id, ticket) for ``route``."""
        ticket_id = self.new_id()
        return ticket_id, f"{ticket_id}.{self._mac(route, ticket_id)}"

    def sign(self, route: str, ticket_id: str) -> str:
        return f"{ticket_id}.{self._mac(route, ticket_id)}"

    def verify(self, route: str, ticket: str) -> str | None:
        """The ticket's id if it is one this key made for ``route``; None otherwise."""
        if len(ticket) != _ID_CHARS + 1 + _MAC_CHARS or ticket[_ID_CHARS] != "." or not _ALPHABET.issuperset(
            ticket[:_ID_CHARS] + ticket[_ID_CHARS + 1 :]
        ):
            return None
        ticket_id, mac = ticket[:_ID_CHARS], ticket[_ID_CHARS + 1 :]
        return ticket_id if hmac.compare_digest(mac, self._mac(route, ticket_id)) else None
