"""The key that signs internal tokens for legacy upstreams, and the JWKS that verifies them.

One PEM private key from a file (a mounted Secret): EC P-256 signs ES256, RSA of 2048 bits
or more RS256; anything else is refused at start with the file and the reason. The ``kid``
is configured or the key's RFC 7638 thumbprint, so a key rotation changes it by itself.
The JWKS holds the public half only.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from ext_authz.errors import SigningKeyError as SigningKeyError

MIN_RSA_BITS = 2048


def _thumbprint(public: dict[str, Any]) -> str:
    """RFC 7638: SHA-256 of the required members, sorted, no whitespace."""
    members = ("crv", "kty", "x", "y") if public["kty"] == "EC" else ("e", "kty", "n")
    canonical = json.dumps({m: public[m] for m in members}, separators=(",", ":"), sort_keys=True)
    return base64.urlsafe_b64encode(hashlib.sha256(canonical.encode()).digest()).rstrip(b"=").decode()


class UpstreamSigner:
    """Signs ``{iss, sub, aud, iat, exp, jti}`` with the configured key."""

    def __init__(self, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey, *, issuer: str, key_id: str | None = None) -> None:
        if isinstance(key, ec.EllipticCurvePrivateKey):
            self.algorithm = "ES256"
            public = jwt.algorithms.ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
        else:
            self.algorithm = "RS256"
            public = jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
        self.key_id = key_id or _thumbprint(public)
        self.issuer = issuer
        self._key = key
        self._headers = {"kid": self.key_id, "typ": "JWT"}
        self._jwks = {"keys": [{**public, "kid": self.key_id, "use": "sig", "alg": self.algorithm}]}

    @classmethod
    def from_file(cls, path: Path, *, issuer: str, key_id: str | None = None) -> UpstreamSigner:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise SigningKeyError(f"{path}: cannot read the signing key ({exc.strerror or type(exc).__name__})") from None
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError, UnicodeError):
            raise SigningKeyError(f"{path}: not an unencrypted PEM private key") from None
        if isinstance(key, ec.EllipticCurvePrivateKey):
            if not isinstance(key.curve, ec.SECP256R1):
                raise SigningKeyError(f"{path}: an EC signing key must be on P-256 (ES256), not {key.curve.name}")
        elif isinstance(key, rsa.RSAPrivateKey):
            if key.key_size < MIN_RSA_BITS:
                raise SigningKeyError(f"{path}: an RSA signing key needs at least {MIN_RSA_BITS} bits, not {key.key_size}")
        else:
            raise SigningKeyError(f"{path}: the signing key must be EC P-256 or RSA, not {type(key).__name__}")
        return cls(key, issuer=issuer, key_id=key_id)

    def sign(self, subject: str, audience: str, issued_at: int, expires_at: int) -> str:
        claims = {"iss": self.issuer, "sub": subject, "aud": audience, "iat": issued_at, "exp": expires_at, "jti": uuid.uuid4().hex}
        return jwt.encode(claims, self._key, algorithm=self.algorithm, headers=self._headers)

    def jwks(self) -> dict[str, Any]:
        """The public key set an upstream verifies with (served on the metrics port)."""
        return self._jwks
