"""A local token issuer: key pairs, a JWKS (file or served over HTTP), signed tokens."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import jwt
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from .threaded_app import ThreadedApp


def forge_signature(token: str) -> str:
    """The token with its signature's first character changed: still canonical base64url, so the
    verifier gets as far as the signature and refuses it as bad_signature. (Changing the last
    character, or writing a run of 'B's, can set the encoding's spare bits and be refused earlier,
    as malformed.)"""
    head, payload, signature = token.split(".")
    return f"{head}.{payload}.{'A' if signature[0] != 'A' else 'B'}{signature[1:]}"


class TestIssuer:
    __test__ = False  # not a pytest class

    def __init__(self, issuer: str = "https://issuer.test/", audience: str = "api") -> None:
        self.issuer = issuer
        self.audience = audience
        self.keys: dict[str, rsa.RSAPrivateKey] = {}
        self.active_kid = self.add_key()

    def add_key(self, kid: str | None = None) -> str:
        kid = kid or f"k-{uuid.uuid4().hex[:8]}"
        self.keys[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        return kid

    def rotate(self) -> str:
        """A new signing key; the old one stays published (as a real rotation does)."""
        self.active_kid = self.add_key()
        return self.active_kid

    def jwks(self) -> dict[str, Any]:
        keys = []
        for kid, key in self.keys.items():
            public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
            keys.append({**public, "kid": kid, "use": "sig", "alg": "RS256"})
        return {"keys": keys}

    def write_jwks(self, path: Path) -> Path:
        path.write_text(json.dumps(self.jwks()))
        return path

    def private_pem(self, kid: str | None = None) -> bytes:
        return self.keys[kid or self.active_kid].private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def token(self, sub: str | None = "alice", *, ttl: float = 3600, kid: str | None = None, **claims: Any) -> str:
        """``sub=None``: a token without the claim."""
        now = int(time.time())
        payload: dict[str, Any] = {
            "iss": self.issuer,
            "aud": self.audience,
            "sub": sub,
            "iat": now,
            "nbf": now,
            "exp": now + int(ttl),
            "jti": uuid.uuid4().hex,
            **claims,
        }
        if sub is None:
            del payload["sub"]
        kid = kid or self.active_kid
        return jwt.encode(payload, self.keys[kid], algorithm="RS256", headers={"kid": kid})


class JwksServer:
    """Serves an issuer's current JWKS over HTTP from a thread; counts fetches."""

    def __init__(self, issuer: TestIssuer, *, max_age: int = 3600) -> None:
        self.issuer = issuer
        self.max_age = max_age
        self.fetches = 0
        self._app = ThreadedApp(lambda app: app.router.add_get("/.well-known/jwks.json", self._jwks), name="JWKS server")
        self.port = self._app.port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/.well-known/jwks.json"

    def start(self) -> JwksServer:
        self._app.start()
        return self

    async def _jwks(self, _: web.Request) -> web.Response:
        self.fetches += 1
        return web.json_response(self.issuer.jwks(), headers={"Cache-Control": f"max-age={self.max_age}"})

    def stop(self) -> None:
        self._app.stop()
