"""A development token issuer: one RSA key pair, its JWKS, and signed tokens.

Local only: `gatehouse dev` trusts this key in ext_authz so that tokens can be minted on
the command line. Nothing here belongs in production.
"""

from __future__ import annotations

import json
from pathlib import Path

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

ISSUER = "https://dev.gatehouse.local/"
AUDIENCE = "api"
KID = "dev-1"


class DevIssuer:
    def __init__(self, directory: Path) -> None:
        self.key_path = directory / "issuer-key.pem"
        self.jwks_path = directory / "jwks.json"

    def ensure(self) -> None:
        """Create the key pair once; later runs keep it, so old tokens stay valid."""
        if not self.key_path.exists():
            generated = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            pem = generated.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
            self.key_path.write_bytes(pem)
            self.key_path.chmod(0o600)
        key = serialization.load_pem_private_key(self.key_path.read_bytes(), password=None)
        if not isinstance(key, rsa.RSAPrivateKey):
            raise ValueError(f"{self.key_path}: expected an RSA private key")
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
        self.jwks_path.write_text(json.dumps({"keys": [{**public, "kid": KID, "use": "sig", "alg": "RS256"}]}))

    def token_command(self, sub: str = "alice", scope: str = "orders:read") -> list[str]:
        return [
            "gatehouse", "token", "--key", str(self.key_path), "--kid", KID, "--iss", ISSUER,
            "--aud", AUDIENCE, "--sub", sub, "--scope", scope,
        ]

    def issuer_config(self) -> dict[str, object]:
        return {"issuer": ISSUER, "audiences": [AUDIENCE], "jwksFile": str(self.jwks_path), "requireJti": True}
