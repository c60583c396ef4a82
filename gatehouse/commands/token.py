"""`gatehouse token`: sign a JWT with a local key, for development and tests.

Not an identity provider: it signs whatever it is told, with a key you give it. `gatehouse
dev` creates the key pair and the JWKS ext_authz trusts.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import jwt


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("token", help="sign a development JWT with a local private key")
    parser.add_argument("--key", type=Path, required=True, help="PEM private key (RSA or EC)")
    parser.add_argument("--kid", required=True, help="key id, as in the JWKS")
    parser.add_argument("--iss", required=True)
    parser.add_argument("--aud", action="append", default=[], help="audience (repeatable)")
    parser.add_argument("--sub", required=True)
    parser.add_argument("--scope", default="", help='space-separated scopes, e.g. "orders:read orders:write"')
    parser.add_argument("--role", default="")
    parser.add_argument("--ttl", type=int, default=3600, help="seconds until exp")
    parser.add_argument("--jti", default="", help="token id (default: random)")
    parser.add_argument("--alg", default="", help="default: RS256 for RSA keys, ES256 for EC keys")
    parser.set_defaults(run=run)


def sign(args: argparse.Namespace, now: float | None = None) -> str:
    pem = args.key.read_bytes()
    alg = args.alg or ("ES256" if b"EC PRIVATE KEY" in pem or _is_ec(pem) else "RS256")
    issued = int(now if now is not None else time.time())
    claims: dict[str, Any] = {
        "iss": args.iss,
        "sub": args.sub,
        "iat": issued,
        "nbf": issued,
        "exp": issued + args.ttl,
        "jti": args.jti or uuid.uuid4().hex,
    }
    if args.aud:
        claims["aud"] = args.aud if len(args.aud) > 1 else args.aud[0]
    if args.scope:
        claims["scope"] = args.scope
    if args.role:
        claims["role"] = args.role
    return jwt.encode(claims, pem, algorithm=alg, headers={"kid": args.kid})


def _is_ec(pem: bytes) -> bool:
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    return isinstance(load_pem_private_key(pem, password=None), ec.EllipticCurvePrivateKey)


def run(args: argparse.Namespace) -> int:
    try:
        print(sign(args))
    except (OSError, ValueError) as exc:
        print(f"error: cannot sign: {exc}", file=sys.stderr)
        return 2
    return 0
