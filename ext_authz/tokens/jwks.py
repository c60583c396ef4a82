"""One issuer's signing keys: asymmetric only, fetched asynchronously, never wiped by a failure.

PyJWT's ``PyJWKClient`` does not fit an asyncio server (docs/architecture.md, "Known pitfalls"): it
fetches with blocking urllib, refetches on every unknown ``kid``, and a failed fetch drops
the good keys (pyjwt#1162). Here:

- keys come from a ``JwksSource``: HTTP (aiohttp, a timeout on every fetch, ``ETag``
  revalidation, ``Cache-Control: max-age`` clamped to [minTtl, maxTtl]) or a file, re-read
  when its mtime changes;
- a background task refreshes before expiry and retries failures with backoff;
- an unknown ``kid`` causes at most one refetch per ``unknownKidCooldown``; concurrent
  requests share the fetch in flight, so a flood of random kids costs one fetch;
- a failed fetch, or a document with no usable key, keeps the previous keys; they serve up
  to ``maxStale`` past their expiry, after which there are no keys (``no_keys``, 503);
- only RSA, EC and OKP keys whose ``use`` is ``sig`` (or absent) are loaded, public members
  only; ``oct`` keys never are, so no HMAC secret can ever be derived from a key here.
  Each key remembers the algorithms it may verify: its ``alg`` or its family's, within the
  issuer's allowed list.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import math
import os
import random
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import jwt
import structlog
from cryptography.hazmat.primitives.asymmetric import rsa

from ext_authz import metrics
from ext_authz.config import Issuer
from ext_authz.error_mapping import JWK_ERRORS, file_jwks_errors, http_jwks_errors
from ext_authz.errors import JwksFetchError, TokenError, UnavailableError

log = structlog.get_logger(component="ext_authz.tokens.jwks")

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]

MAX_KID_LENGTH = 256
MAX_JWKS_BYTES = 1 << 20
MIN_RSA_BITS = 2048
FILE_POLL_SECONDS = 1.0
MAX_RETRY_SECONDS = 60.0
REFRESH_AT_FRACTION = 0.8
"""Refresh when this fraction of the TTL has passed, so keys are renewed before they expire."""

_KID = re.compile(r"[A-Za-z0-9._:+=-]{1,%d}" % MAX_KID_LENGTH)
_RSA_ALGS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
_CURVE_ALGS = {
    "EC": {"P-256": frozenset({"ES256"}), "P-384": frozenset({"ES384"}), "P-521": frozenset({"ES512"})},
    "OKP": {"Ed25519": frozenset({"EdDSA"}), "Ed448": frozenset({"EdDSA"})},
}
_PUBLIC_MEMBERS = {"RSA": ("n", "e"), "EC": ("crv", "x", "y"), "OKP": ("crv", "x")}


def is_safe_kid(kid: object) -> bool:
    """A kid we will look up: ≤ 256 chars of [A-Za-z0-9._:+=-], nothing path-like (/ \\ ..)."""
    return isinstance(kid, str) and _KID.fullmatch(kid) is not None and ".." not in kid


@dataclass(frozen=True, slots=True)
class VerificationKey:
    kid: str | None
    jwk: jwt.PyJWK
    algorithms: frozenset[str]


def key_from_jwk(entry: object, allowed: frozenset[str]) -> VerificationKey | None:
    """The public signing key in one JWK, or None when it is not one we may use."""
    if not isinstance(entry, dict):
        return None
    kty = entry.get("kty")
    if not isinstance(kty, str) or kty not in _PUBLIC_MEMBERS:  # oct (HMAC secrets), unknown types
        return None
    members = _PUBLIC_MEMBERS[kty]
    if entry.get("use", "sig") != "sig":
        return None
    ops = entry.get("key_ops")
    if ops is not None and (not isinstance(ops, list) or "verify" not in ops):
        return None
    kid = entry.get("kid")
    if kid is not None and not is_safe_kid(kid):
        return None
    crv = entry.get("crv")
    family = _RSA_ALGS if kty == "RSA" else _CURVE_ALGS[kty].get(crv if isinstance(crv, str) else "", frozenset())
    alg = entry.get("alg")
    if alg is not None:
        family = family & {alg} if isinstance(alg, str) else frozenset()
    algorithms = family & allowed
    if not algorithms:
        return None
    public: dict[str, Any] = {"kty": kty, **{m: entry[m] for m in members if m in entry}}
    if kid is not None:
        public["kid"] = kid
    try:
        pyjwk = jwt.PyJWK(public, algorithm=min(algorithms))
    except JWK_ERRORS:
        return None
    if isinstance(pyjwk.key, rsa.RSAPublicKey) and pyjwk.key.key_size < MIN_RSA_BITS:
        return None
    return VerificationKey(kid, pyjwk, algorithms)


def load_jwks(document: object, allowed: frozenset[str]) -> tuple[list[VerificationKey], int]:
    """The usable keys of a JWKS document and how many entries were ignored. The first of
    two keys with one kid wins. Raises ValueError when it is not a JWKS at all."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise ValueError("not a JWKS document (no keys array)")
    keys: list[VerificationKey] = []
    kids: set[str] = set()
    for entry in document["keys"]:
        key = key_from_jwk(entry, allowed)
        if key is not None and key.kid not in kids:
            keys.append(key)
            if key.kid is not None:
                kids.add(key.kid)
    return keys, len(document["keys"]) - len(keys)


def cache_max_age(cache_control: str | None, age: str | None = None) -> float | None:
    """Seconds of freshness left from ``Cache-Control`` (``max-age`` minus ``Age``);
    ``no-cache``/``no-store`` give 0; None when the response says nothing usable."""
    if not cache_control:
        return None
    max_age: float | None = None
    for directive in cache_control.lower().split(","):
        name, _, value = directive.strip().partition("=")
        if name in ("no-cache", "no-store"):
            return 0.0
        if name == "max-age" and value.strip().strip('"').isdigit():
            max_age = float(value.strip().strip('"'))
    if max_age is not None and age is not None and age.strip().isdigit():
        max_age = max(0.0, max_age - float(age.strip()))
    return max_age


@dataclass(frozen=True, slots=True)
class JwksFetch:
    document: object | None
    """The parsed JWKS JSON, or None when unchanged since ``version`` (304 / same mtime)."""
    version: object | None = None
    """ETag or file stamp, handed back to the next fetch."""
    max_age: float | None = None


class JwksSource(Protocol):
    """Where one issuer's JWKS comes from. ``fetch`` raises JwksFetchError on failure."""

    poll_interval: float | None
    """Refresh every this many seconds (files); None: follow Cache-Control max-age."""

    async def fetch(self, known_version: object | None) -> JwksFetch: ...


class HttpJwksSource:
    poll_interval: float | None = None

    def __init__(
        self, url: str, session: aiohttp.ClientSession, *, timeout: float, max_bytes: int = MAX_JWKS_BYTES
    ) -> None:
        self.url = url
        self._session = session
        self._timeout = timeout
        self._max_bytes = max_bytes

    async def fetch(self, known_version: object | None) -> JwksFetch:
        headers = {"Accept": "application/json"}
        if isinstance(known_version, str):
            headers["If-None-Match"] = known_version
        with http_jwks_errors(self.url, self._timeout):
            async with asyncio.timeout(self._timeout):
                async with self._session.get(self.url, headers=headers, max_redirects=3) as resp:
                    max_age = cache_max_age(resp.headers.get("Cache-Control"), resp.headers.get("Age"))
                    if resp.status == 304 and known_version is not None:
                        return JwksFetch(None, known_version, max_age)
                    if resp.status != 200:
                        raise JwksFetchError(f"HTTP {resp.status}", source=self.url, reason="http_status")
                    body = bytearray()
                    async for chunk in resp.content.iter_any():
                        body += chunk
                        if len(body) > self._max_bytes:
                            raise JwksFetchError(
                                f"JWKS larger than {self._max_bytes} bytes", source=self.url, reason="too_large"
                            )
                    return JwksFetch(json.loads(body), resp.headers.get("ETag"), max_age)


class FileJwksSource:
    def __init__(self, path: Path, *, poll_interval: float = FILE_POLL_SECONDS) -> None:
        self.path = path
        self.poll_interval: float | None = poll_interval

    async def fetch(self, known_version: object | None) -> JwksFetch:
        return await asyncio.to_thread(self._read, known_version)

    def _read(self, known_version: object | None) -> JwksFetch:
        with file_jwks_errors(self.path):
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
            if stamp == known_version:
                return JwksFetch(None, stamp)
            if st.st_size > MAX_JWKS_BYTES:
                raise JwksFetchError(
                    f"JWKS file larger than {MAX_JWKS_BYTES} bytes", source=str(self.path), reason="too_large"
                )
            return JwksFetch(json.loads(self.path.read_bytes()), stamp)


class IssuerKeys:
    """The current keys of one issuer. ``start()`` loads and starts background refresh;
    ``key_for()`` is what a check calls. Times come from ``clock`` (monotonic seconds)."""

    def __init__(self, issuer: Issuer, source: JwksSource, *, clock: Clock = time.monotonic, sleep: Sleep = asyncio.sleep) -> None:
        self.issuer = issuer
        self._source = source
        self._clock = clock
        self._sleep = sleep
        self._allowed = frozenset(issuer.algorithms)
        cfg = issuer.jwks
        self._min_ttl, self._max_ttl = cfg.min_ttl.seconds, cfg.max_ttl.seconds
        self._cooldown, self._max_stale = cfg.unknown_kid_cooldown.seconds, cfg.max_stale.seconds
        self._keys: tuple[VerificationKey, ...] = ()
        self._by_kid: dict[str, VerificationKey] = {}
        self._version: object | None = None
        self._failures = 0
        self._last_kid_refetch = -math.inf
        self._inflight: asyncio.Task[bool] | None = None
        self._task: asyncio.Task[None] | None = None
        self.expires_at = -math.inf
        """Clock time the keys expire; they keep serving until ``expires_at + maxStale``."""
        self.refresh_at = -math.inf
        """Clock time of the next background refresh."""
        self.fetches = 0
        """Fetches started; each ends as one of the three below (or is cancelled at shutdown)."""
        self.fetches_ok = 0
        """A document was read and its keys installed."""
        self.fetches_not_modified = 0
        """HTTP 304 or an unchanged file: the keys were confirmed as they are."""
        self.fetch_errors = 0
        """Failed (HTTP error, timeout, not JSON, no usable key...): the previous keys were kept."""
        self.unknown_kid_refetches = 0
        self._fetch_seconds = metrics.JWKS_FETCH_SECONDS.labels(issuer.issuer)
        self.keys_ignored = 0
        """Entries of the last loaded document that were not usable signing keys."""

    @classmethod
    def from_config(
        cls, issuer: Issuer, *, session: aiohttp.ClientSession | None, base_dir: Path = Path("."), clock: Clock = time.monotonic
    ) -> IssuerKeys:
        if issuer.jwks_url is not None:
            if session is None:
                raise ValueError(f"issuer {issuer.issuer}: jwksUrl needs an aiohttp session")
            return cls(issuer, HttpJwksSource(issuer.jwks_url, session, timeout=issuer.jwks.timeout.seconds), clock=clock)
        assert issuer.jwks_file is not None
        path = Path(issuer.jwks_file).expanduser()
        return cls(issuer, FileJwksSource(path if path.is_absolute() else base_dir / path), clock=clock)

    @property
    def has_keys(self) -> bool:
        """Readiness: there are keys and they are not stale beyond maxStale."""
        return bool(self._keys) and self._clock() < self.expires_at + self._max_stale

    @property
    def kids(self) -> frozenset[str]:
        return frozenset(self._by_kid)

    def is_current(self, kid: str | None) -> bool:
        """Whether a token verified with ``kid`` may still be trusted (for cache hits)."""
        return self.has_keys and (kid is None or kid in self._by_kid)

    async def start(self) -> None:
        """Load once, then refresh in the background. A failed first load is logged, not
        raised: ``has_keys`` stays False (not ready) and the background task retries."""
        if self._task is not None:
            return
        await self.refresh()
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"jwks {self.issuer.issuer}")

    async def close(self) -> None:
        for task in (self._task, self._inflight):
            if task is not None and not task.done():
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        self._task = None

    async def refresh(self) -> bool:
        """Fetch now, or join the fetch in flight. True when the keys were (re)confirmed."""
        if self._inflight is None or self._inflight.done():
            # A fresh context: the fetch is shared by every check waiting for it, so its log
            # lines must not carry the request id of the check that happened to start it.
            self._inflight = asyncio.get_running_loop().create_task(self._fetch(), context=contextvars.Context())
        return await asyncio.shield(self._inflight)

    async def key_for(self, kid: str | None, alg: str) -> jwt.PyJWK:
        """The key that verifies a token with this ``kid`` and ``alg``, refetching once per
        cooldown for an unknown kid. A token without kid gets the issuer's only key for ``alg``."""
        if alg not in self._allowed:
            raise TokenError("alg_not_allowed", "the token's algorithm is not allowed for its issuer")
        key = self._find(kid, alg)
        if key is None and self._may_refetch(kid):
            await self.refresh()
            key = self._find(kid, alg)
        if key is None:
            if not self.has_keys:
                raise UnavailableError("no_keys", "no usable signing keys for the token's issuer")
            raise TokenError("unknown_kid", "no signing key matches the token's kid")
        if alg not in key.algorithms:
            raise TokenError("alg_not_allowed", "the token's algorithm does not match its key")
        return key.jwk

    def _find(self, kid: str | None, alg: str) -> VerificationKey | None:
        if not self.has_keys:
            return None
        if kid is not None:
            return self._by_kid.get(kid)
        if len(self._keys) == 1:
            return self._keys[0]
        candidates = [k for k in self._keys if alg in k.algorithms]
        return candidates[0] if len(candidates) == 1 else None

    def _may_refetch(self, kid: str | None) -> bool:
        if self._inflight is not None and not self._inflight.done():
            return True  # joining the fetch in flight costs nothing
        if kid is None and self.has_keys:
            return False  # nothing new to look for
        now = self._clock()
        if now - self._last_kid_refetch < self._cooldown:
            return False
        self._last_kid_refetch = now
        self.unknown_kid_refetches += 1
        return True

    async def _run(self) -> None:
        while True:
            delay = self.refresh_at - self._clock()
            if delay > 0:
                await self._sleep(delay)
                continue
            await self.refresh()

    async def _fetch(self) -> bool:
        self.fetches += 1
        started = time.perf_counter()
        try:
            result = await self._source.fetch(self._version)
            if result.document is not None:
                keys, ignored = load_jwks(result.document, self._allowed)
                if not keys:
                    raise JwksFetchError(f"no usable signing key among {ignored} entries", reason="no_usable_key")
                self._install(keys, ignored)
            self._version = result.version
            self._confirmed(result.max_age)
            if result.document is not None:
                self.fetches_ok += 1
            else:
                self.fetches_not_modified += 1
            self._fetch_seconds.observe(time.perf_counter() - started)
            return True
        except Exception as exc:  # noqa: BLE001 - a failure of any kind keeps the keys we have
            self._fetch_seconds.observe(time.perf_counter() - started)
            self._failed(exc)
            return False

    def _install(self, keys: list[VerificationKey], ignored: int) -> None:
        self._keys = tuple(keys)
        self._by_kid = {k.kid: k for k in keys if k.kid is not None}
        self.keys_ignored = ignored
        log.info("jwks_loaded", issuer=self.issuer.issuer, keys=len(keys), ignored=ignored, kids=sorted(self._by_kid)[:20])

    def _confirmed(self, max_age: float | None) -> None:
        now = self._clock()
        self._failures = 0
        if self._source.poll_interval is not None:
            self.expires_at = self.refresh_at = now + self._source.poll_interval
            return
        ttl = min(max(self._min_ttl if max_age is None else max_age, self._min_ttl), self._max_ttl)
        self.expires_at = now + ttl
        self.refresh_at = now + ttl * REFRESH_AT_FRACTION

    def _failed(self, exc: Exception) -> None:
        self.fetch_errors += 1
        self._failures += 1
        backoff = min(MAX_RETRY_SECONDS, 2.0 ** min(self._failures - 1, 6))
        self.refresh_at = self._clock() + backoff * random.uniform(0.5, 1.0)
        error = str(exc) if isinstance(exc, JwksFetchError | ValueError) else type(exc).__name__
        log.warning(
            "jwks_fetch_failed",
            issuer=self.issuer.issuer,
            error=error,
            keys_kept=len(self._keys),
            usable=self.has_keys,
        )
