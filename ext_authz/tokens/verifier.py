"""From an ``Authorization`` header to a VerifiedToken, strictly; every denial is a TokenError
with a precise ``reason`` (UnavailableError ``no_keys`` when the issuer has no usable keys).

Checks run cheapest first, the signature last but one:
header shape and size → three base64url segments → JOSE header rules → issuer chosen by the
(unverified) ``iss`` → key by ``kid`` and ``alg`` → PyJWT: signature, ``iss``, ``aud``,
required claims → ``exp``/``nbf``/``iat`` on our clock → ``jti``.

Decisions:
- one value only: Envoy joins repeated headers with ",", so any comma is ``duplicate``;
  the scheme is case-insensitive (RFC 7235), one space, no padding, no whitespace.
- ``alg`` must be in the issuer's list (asymmetric only, see config.Algorithm); ``none`` in
  any case is refused before anything else looks at the token.
- ``jku``/``x5u``/``jwk``/``x5c`` are refused outright: keys come from the JWKS only.
- ``crit``: we implement no extension, so any ``crit`` is ``unknown_crit``; ``b64`` (RFC 7797
  unencoded payloads) is refused as ``malformed``.
- ``aud``: a string or an array of strings; accepted when ANY element equals ANY configured
  audience (RFC 7519 §4.1.3). With no audiences configured, ``aud`` is not checked here:
  per-route audiences are the service layer's.
- time: PyJWT's own exp/nbf/iat checks read the wall clock, so they are off and done here
  with the injected clock and the same semantics: expired when ``now >= exp + leeway``, not
  yet valid when ``nbf > now + leeway``, ``iat > now + leeway`` is ``issued_in_future``.
  These claims must be JSON numbers in [0, 1e11].
- JSON with duplicate member names, NaN or Infinity is ``malformed``.
- a cache hit skips the signature but re-checks ``exp`` on the clock and that the token's
  issuer still has usable keys including its ``kid`` (a key dropped from the JWKS stops its
  cached tokens at once).
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import jwt

from ext_authz.config import Issuer
from ext_authz.error_mapping import SIGNATURE_ERRORS
from ext_authz.errors import TokenError
from ext_authz.tokens.jwks import IssuerKeys, is_safe_kid
from ext_authz.tokens.cache import TokenCache, token_digest

_SEGMENT = re.compile(r"[A-Za-z0-9_-]*")
_KEY_HEADERS = ("jku", "x5u", "jwk", "x5c")
_SCHEME = "bearer "
DEFAULT_CACHE_MAX_AGE = 300.0
DEFAULT_CACHE_MAX_BYTES = 64 << 20
MAX_NUMERIC_DATE = 1e11
"""Year 5138: larger times are refused, so no arithmetic overflows (and NaN fails the test)."""


@dataclass(frozen=True, slots=True)
class VerifiedToken:
    issuer: str
    subject: str | None
    jti: str | None
    expires_at: float
    """``exp``, seconds since the epoch."""
    claims: Mapping[str, Any]
    """All claims, read-only at the top level. Values are untrusted text for headers."""
    token_hash: bytes
    """sha256 of the token: a key for logs and caches that never reveals the token."""

    @property
    def audiences(self) -> tuple[str, ...]:
        aud = self.claims.get("aud")
        if isinstance(aud, str):
            return (aud,)
        return tuple(a for a in aud if isinstance(a, str)) if isinstance(aud, list) else ()


def bearer_token(authorization: str | None, max_token_bytes: int) -> str:
    """The token of exactly one ``Authorization: Bearer <jwt>`` value, shape-checked."""
    token = _credentials(authorization, max_token_bytes)
    _check_segments(token)
    return token


def _credentials(authorization: str | None, max_token_bytes: int) -> str:
    if authorization is None:
        raise TokenError("missing", "no Authorization header")
    if len(authorization) > max_token_bytes + len(_SCHEME):
        raise TokenError("too_large", f"token longer than {max_token_bytes} bytes")
    if "," in authorization:
        raise TokenError("duplicate", "more than one Authorization value")
    if authorization[: len(_SCHEME)].lower() != _SCHEME:
        raise TokenError("malformed", "expected 'Bearer <token>'")
    token = authorization[len(_SCHEME) :]
    if len(token) > max_token_bytes:
        raise TokenError("too_large", f"token longer than {max_token_bytes} bytes")
    return token


def _check_segments(token: str) -> None:
    segments = token.split(".")
    if len(segments) != 3:
        raise TokenError("malformed", "a JWT has three dot-separated segments")
    if not segments[0] or not segments[1] or not all(_SEGMENT.fullmatch(s) for s in segments):
        raise TokenError("malformed", "segments must be unpadded base64url")


def _b64url(segment: str) -> bytes:
    if len(segment) % 4 == 1:
        raise TokenError("malformed", "a segment is not valid base64url")
    raw = base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
    if base64.urlsafe_b64encode(raw).rstrip(b"=") != segment.encode():
        raise TokenError("malformed", "a segment is not canonical base64url")
    return raw


def _object_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ValueError("duplicate member name")
    return obj


def _reject_constant(name: str) -> Any:
    raise ValueError("non-finite number")


def _json_object(segment: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(_b64url(segment), object_pairs_hook=_object_pairs, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        raise TokenError("malformed", f"the {what} is not valid JSON") from None
    if not isinstance(value, dict):
        raise TokenError("malformed", f"the {what} is not a JSON object")
    return value


def check_header(header: Mapping[str, Any]) -> tuple[str, str | None]:
    """(alg, kid) of a JOSE header we accept to look at further."""
    alg = header.get("alg")
    if not isinstance(alg, str) or not alg or alg.lower() == "none":
        raise TokenError("alg_not_allowed", "the token's alg is missing or none")
    if any(name in header for name in _KEY_HEADERS):
        raise TokenError("untrusted_key_header", "keys named in the token header (jku, x5u, jwk, x5c) are not trusted")
    if "crit" in header:
        raise TokenError("unknown_crit", "the token requires a header extension (crit) this service does not implement")
    if "b64" in header:
        raise TokenError("malformed", "unencoded payloads (b64) are not accepted")
    kid = header.get("kid")
    if "kid" in header and not is_safe_kid(kid):
        raise TokenError("bad_kid", "the token's kid is too long or has characters outside [A-Za-z0-9._:+=-]")
    return alg, kid


def _check_signature(signing_input: bytes, signature: bytes, pyjwk: jwt.PyJWK, alg: str) -> None:
    """The signature, checked with the key's library object directly: the payload is already
    parsed here, and PyJWT's decode would parse and re-validate the token a second time."""
    try:
        algorithm = jwt.get_algorithm_by_name(alg)
        valid = algorithm.verify(signing_input, pyjwk.key, signature)
    except SIGNATURE_ERRORS:
        raise TokenError("bad_signature", "the key cannot verify this token") from None
    if not valid:
        raise TokenError("bad_signature", "the signature does not verify")


def _check_claims(claims: Mapping[str, Any], policy: _Policy) -> None:
    for name in policy.required:
        if claims.get(name) is None:  # null counts as missing, as in RFC 7519 processing
            if name == "aud":
                raise TokenError("audience", "the token has no audience")
            if name == "jti":
                raise TokenError("missing_jti", "the token has no jti")
            raise TokenError("missing_claim", f"required claim '{name}' is missing")
    if policy.audiences:
        aud = claims.get("aud")
        values = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else None
        if not values or not all(isinstance(v, str) for v in values) or not policy.audiences.intersection(values):
            raise TokenError("audience", "the token is not for an accepted audience")
    for name in ("sub", "jti"):
        if name in claims and not isinstance(claims[name], str):
            raise TokenError("bad_claim", "sub and jti must be strings")


def _numeric_date(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_NUMERIC_DATE:
        raise TokenError("bad_claim", f"claim '{name}' is not a NumericDate")
    return float(value)


@dataclass(frozen=True, slots=True)
class _Policy:
    keys: IssuerKeys
    issuer: Issuer
    required: tuple[str, ...]
    audiences: frozenset[str]
    leeway: float


@dataclass(frozen=True, slots=True)
class _Cached:
    token: VerifiedToken
    keys: IssuerKeys
    kid: str | None


def _policy(keys: IssuerKeys) -> _Policy:
    issuer = keys.issuer
    required = tuple(dict.fromkeys([*issuer.required_claims, "exp", "iss", *(["aud"] if issuer.audiences else [])]))
    return _Policy(keys, issuer, required, frozenset(issuer.audiences), issuer.leeway.seconds)


# Failures that the same token string will always meet again: remembered for a while so a
# replayed bad token costs a hash lookup, not a signature check. Time- and key-dependent
# failures (expired, not_yet_valid, unknown_kid, no_keys) are not remembered.
_STABLE_FAILURES = frozenset(
    {"malformed", "bad_signature", "alg_not_allowed", "untrusted_key_header", "unknown_crit", "bad_kid",
     "unknown_issuer", "audience", "missing_claim", "bad_claim", "missing_jti", "issued_in_future"}
)
FAILURE_CACHE_SIZE = 10_000
FAILURE_CACHE_SECONDS = 60.0


class TokenVerifier:
    """Verifies bearer tokens for a fixed set of issuers (one IssuerKeys each)."""

    def __init__(
        self,
        issuers: Sequence[IssuerKeys],
        *,
        cache_size: int,
        max_token_bytes: int,
        clock: Callable[[], float] = time.time,
        cache_max_age: float = DEFAULT_CACHE_MAX_AGE,
        cache_max_bytes: int | None = DEFAULT_CACHE_MAX_BYTES,
    ) -> None:
        self._policies = {k.issuer.issuer: _policy(k) for k in issuers}
        if len(self._policies) != len(issuers):
            raise ValueError("each issuer may appear once")
        self._max_token_bytes = max_token_bytes
        self._clock = clock
        self._cache: TokenCache[_Cached] = TokenCache(cache_size, max_age=cache_max_age, max_bytes=cache_max_bytes)
        self._failures: TokenCache[tuple[str, str]] = TokenCache(FAILURE_CACHE_SIZE, max_age=FAILURE_CACHE_SECONDS)
        self.cache_hits = 0
        """Checks answered from the verified-token cache (no signature check)."""
        self.failure_hits = 0
        """Checks answered from the failure cache: a token string already refused for a stable reason."""
        self.cache_misses = 0
        """Checks in neither cache: the token was parsed and checked from scratch."""
        self.verifications = 0
        """Signature checks made (a miss that got as far as the key)."""

    async def verify(self, authorization: str | None) -> VerifiedToken:
        token = _credentials(authorization, self._max_token_bytes)
        digest = token_digest(token)
        now = self._clock()
        cached = self._cache.get(digest, now)
        if cached is not None and now < cached.token.expires_at and cached.keys.is_current(cached.kid):
            self.cache_hits += 1  # the same string passed every check below, signature included
            return cached.token
        failed = self._failures.get(digest, now)
        if failed is not None:
            self.failure_hits += 1
            raise TokenError(*failed)
        self.cache_misses += 1
        try:
            verified, kid, policy = await self._verify_new(token, digest)
        except TokenError as exc:
            if exc.reason in _STABLE_FAILURES:
                self._failures.put(digest, (exc.reason, exc.message), expires_at=now + FAILURE_CACHE_SECONDS, now=now)
            raise
        self._cache.put(
            digest, _Cached(verified, policy.keys, kid), expires_at=verified.expires_at, now=self._clock(), size=len(token)
        )
        return verified

    @property
    def cache_entries(self) -> int:
        """Verified tokens held in the cache now."""
        return len(self._cache)

    async def _verify_new(self, token: str, digest: bytes) -> tuple[VerifiedToken, str | None, _Policy]:
        _check_segments(token)
        header_segment, payload_segment, signature_segment = token.split(".")
        alg, kid = check_header(_json_object(header_segment, "header"))
        claims = _json_object(payload_segment, "payload")
        policy = self._issuer(claims)
        pyjwk = await policy.keys.key_for(kid, alg)
        self.verifications += 1
        _check_signature(f"{header_segment}.{payload_segment}".encode(), _b64url(signature_segment), pyjwk, alg)
        _check_claims(claims, policy)
        return self._finish(claims, policy, digest), kid, policy

    def _issuer(self, unverified: Mapping[str, Any]) -> _Policy:
        iss = unverified.get("iss")
        if iss is None:
            raise TokenError("missing_claim", "required claim 'iss' is missing")
        policy = self._policies.get(iss) if isinstance(iss, str) else None
        if policy is None:
            raise TokenError("unknown_issuer", "the token's issuer is not configured")
        return policy

    def _finish(self, claims: dict[str, Any], policy: _Policy, digest: bytes) -> VerifiedToken:
        now, leeway = self._clock(), policy.leeway
        exp = _numeric_date(claims, "exp")
        nbf = _numeric_date(claims, "nbf")
        iat = _numeric_date(claims, "iat")
        assert exp is not None  # required above
        if now >= exp + leeway:
            raise TokenError("expired", "the token has expired")
        if nbf is not None and nbf > now + leeway:
            raise TokenError("not_yet_valid", "the token is not valid yet (nbf)")
        if iat is not None and iat > now + leeway:
            raise TokenError("issued_in_future", "the token was issued in the future (iat)")
        jti = claims.get("jti")
        if policy.issuer.require_jti and not jti:
            raise TokenError("missing_jti", "the token has no jti")
        sub = claims.get("sub")
        return VerifiedToken(
            issuer=policy.issuer.issuer,
            subject=sub if isinstance(sub, str) else None,
            jti=jti if isinstance(jti, str) else None,
            expires_at=exp,
            claims=MappingProxyType(claims),
            token_hash=digest,
        )
