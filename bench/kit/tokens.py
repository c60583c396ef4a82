"""The benchmarks' tokens: the audience and scope their routes require, an ES256 issuer beside
the harness's RS256 ``TestIssuer``, files of distinct tokens for the cold scenarios (each
request a new token, read by ``bench.kit.wrk.TOKENS_LUA``), and a token whose signature fails."""

from __future__ import annotations

import json
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import jwt
from cryptography.hazmat.primitives.asymmetric import ec

AUDIENCE = "api"
SCOPE = "bench:read"
"""The scope the benchmarks' authenticated routes require."""


class Issuer(Protocol):
    def token(self, sub: str = "alice", *, ttl: float = 3600, **claims: Any) -> str: ...


def claims() -> dict[str, Any]:
    """Every bench token's extra claims: the routes' scope and a role (all three identity headers set)."""
    return {"scope": f"{SCOPE} bench:write", "role": "user"}


class Es256Issuer:
    """An ES256 (P-256) issuer: the same claims as TestIssuer, signed with an EC key."""

    def __init__(self, issuer: str = "https://es256.issuer.test/", audience: str = AUDIENCE) -> None:
        self.issuer = issuer
        self.audience = audience
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.kid = f"es-{uuid.uuid4().hex[:8]}"

    def write_jwks(self, path: Path) -> Path:
        public = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(self.key.public_key()))
        path.write_text(json.dumps({"keys": [{**public, "kid": self.kid, "use": "sig", "alg": "ES256"}]}))
        return path

    def token(self, sub: str = "alice", *, ttl: float = 3600, **claims: Any) -> str:
        now = int(time.time())
        payload = {"iss": self.issuer, "aud": self.audience, "sub": sub, "iat": now, "nbf": now,
                   "exp": now + int(ttl), "jti": uuid.uuid4().hex, **claims}
        return jwt.encode(payload, self.key, algorithm="ES256", headers={"kid": self.kid})


def write_tokens(path: Path, issuer: Issuer, count: int, ttl: float) -> dict[str, Any]:
    """``count`` distinct valid tokens, one per line (distinct sub and jti), signed here."""
    started = time.perf_counter()
    with open(path, "w") as out:
        for index in range(count):
            out.write(issuer.token(f"user-{index}", ttl=ttl, **claims()))
            out.write("\n")
    seconds = time.perf_counter() - started
    return {"count": count, "file": str(path), "generate_s": round(seconds, 2), "bytes_each": len(path.read_text().split("\n", 1)[0])}


class Rs256Keys(Protocol):
    """What ``write_tokens_in_parallel`` needs of the harness's TestIssuer."""

    issuer: str
    audience: str
    active_kid: str

    def private_pem(self) -> bytes: ...


def _sign_chunk(pem: bytes, kid: str, issuer: str, audience: str, start: int, count: int, ttl: int) -> list[str]:
    """RS256 tokens ``user-<start>`` … (in a pool worker: signing is 1.6 ms each)."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(pem, password=None)
    now = int(time.time())
    out = []
    for index in range(start, start + count):
        payload = {"iss": issuer, "aud": audience, "sub": f"user-{index}", "iat": now, "nbf": now, "exp": now + ttl,
                   "jti": uuid.uuid4().hex, **claims()}
        out.append(jwt.encode(payload, key, algorithm="RS256", headers={"kid": kid}))  # type: ignore[arg-type]  # an RSA PEM
    return out


def write_tokens_in_parallel(path: Path, issuer: Rs256Keys, count: int, ttl: int, processes: int, *, first: int = 0) -> dict[str, Any]:
    """``write_tokens`` for an RS256 issuer, signed by ``processes`` worker processes;
    subjects from ``user-<first>`` (a file per round never repeats an earlier round's token)."""
    started = time.perf_counter()
    pem = issuer.private_pem()
    chunk = max(1, -(-count // (processes * 4)))
    with ProcessPoolExecutor(max_workers=processes) as pool:
        futures = [pool.submit(_sign_chunk, pem, issuer.active_kid, issuer.issuer, issuer.audience, start, min(chunk, first + count - start), ttl)
                   for start in range(first, first + count, chunk)]
        with open(path, "w") as out:
            for future in futures:
                for token in future.result():
                    out.write(token + "\n")
    return {"count": count, "file": str(path), "generate_s": round(time.perf_counter() - started, 1),
            "bytes_each": len(path.read_text().split("\n", 1)[0])}


def bad_signature(token: str) -> str:
    """The same token with its signature's first bytes changed: parses, verifies (RSA), fails."""
    head, payload, signature = token.split(".")
    flipped = ("A" if signature[0] != "A" else "B") + ("A" if signature[1] != "A" else "B") + signature[2:]
    return f"{head}.{payload}.{flipped}"
