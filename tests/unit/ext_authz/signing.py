"""Real keys (cryptography) and tokens (PyJWT) for the ext_authz tests, plus a fake clock and
a fake JWKS source that counts fetches and can fail or hold a fetch open."""

from __future__ import annotations

import asyncio
import base64
import copy
import functools
import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from ext_authz.config import Issuer
from ext_authz.errors import JwksFetchError
from ext_authz.tokens.jwks import JwksFetch

ISSUER = "https://auth.example.com/"
NOW = 1_700_000_000.0


@dataclass(frozen=True)
class SigningKey:
    kid: str
    alg: str
    private: Any

    @property
    def public_pem(self) -> bytes:
        return bytes(
            self.private.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def jwk(self, **extra: Any) -> dict[str, Any]:
        """The public JWK (no alg unless given), with ``use: sig`` and the kid."""
        algorithm = RSAAlgorithm if self.alg.startswith(("RS", "PS")) else ECAlgorithm
        data: dict[str, Any] = algorithm.to_jwk(self.private.public_key(), as_dict=True)
        data.update({"kid": self.kid, "use": "sig"})
        data.update(extra)
        return {k: v for k, v in data.items() if v is not None}

    def sign(self, claims: dict[str, Any], *, headers: dict[str, Any] | None = None, alg: str | None = None) -> str:
        merged = {"kid": self.kid, **(headers or {})}
        merged = {k: v for k, v in merged.items() if v is not None}
        return jwt.encode(claims, self.private, algorithm=alg or self.alg, headers=merged)


@functools.cache
def rsa_key(kid: str = "rsa-1") -> SigningKey:
    return SigningKey(kid, "RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048))


@functools.cache
def ec_key(kid: str = "ec-1") -> SigningKey:
    return SigningKey(kid, "ES256", ec.generate_private_key(ec.SECP256R1()))


def b64url(data: bytes | str) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def raw_token(header: dict[str, Any] | bytes, payload: dict[str, Any] | bytes, signature: bytes = b"sig") -> str:
    """A token assembled by hand, for inputs PyJWT would refuse to produce."""
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    p = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return f"{b64url(h)}.{b64url(p)}.{b64url(signature)}"


def hmac_token(header: dict[str, Any], payload: dict[str, Any], secret: bytes) -> str:
    """HS256 over header.payload with ``secret``: the classic RS→HS key-confusion token."""
    signing_input = f"{b64url(json.dumps(header))}.{b64url(json.dumps(payload))}"
    mac = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(mac)}"


def claims(**overrides: Any) -> dict[str, Any]:
    """Valid claims at NOW; an override of None removes the claim."""
    base: dict[str, Any] = {
        "iss": ISSUER,
        "aud": "api",
        "sub": "user-1",
        "jti": "jti-1",
        "iat": int(NOW) - 10,
        "nbf": int(NOW) - 10,
        "exp": int(NOW) + 600,
        "role": "admin",
        "scope": "orders:read",
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def issuer(**fields: Any) -> Issuer:
    data: dict[str, Any] = {"issuer": ISSUER, "audiences": ["api"], "jwksUrl": "https://auth.example.com/jwks", "leeway": "30s"}
    data.update(fields)
    return Issuer.model_validate({k: v for k, v in data.items() if v is not None})


class FakeClock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeSource:
    """A JwksSource that counts fetches; ``fail`` makes them fail; ``gate`` holds them open."""

    poll_interval: float | None = None

    def __init__(self, *keys: dict[str, Any], max_age: float | None = None) -> None:
        self.document: dict[str, Any] = {"keys": list(keys)}
        self.max_age = max_age
        self.calls = 0
        self.fail = False
        self.gate: asyncio.Event | None = None

    async def fetch(self, known_version: object | None) -> JwksFetch:
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise JwksFetchError("HTTP 500")
        return JwksFetch(copy.deepcopy(self.document), None, self.max_age)
