"""Token swap for legacy upstreams: the ``authorization`` line the HTTP check answers with
on a route with ``auth.upstreamToken`` (docs/upstream-token.md).

After the client's token passed, the upstream gets, instead of it, either

- an internal JWT signed here (``UpstreamSigner``): ``iss`` configured, ``sub`` the
  verified subject, ``aud`` the route's audience, ``exp`` = min(now + ttl, the client
  token's exp); or
- with ``exchange``, a token from an RFC 8693 endpoint (``TokenExchange``).

Envoy puts the line upstream through ``allowed_upstream_headers``, replacing the client's
``authorization``. A line is kept per (client token, audience, exchange URL) and reused
until shortly before its token expires (``REUSE_MARGIN_*``; a token already capped at the
client token's exp, to that exp) and never past the client token's exp, so a warm check costs one dict lookup and a clock read. Concurrent misses
for one key share a single exchange call. The cache is bounded: when full, the older
half goes.

Failure policy: no token (exchange down, slow, refusing, or answering nonsense) denies
the request. The answer is 424 with ``x-gatehouse-upstream-token: unavailable``, which
the gateway's local reply mapper turns into 503 ``upstream_token_unavailable`` with
``Retry-After`` (control_plane/translator/local_replies.py): a 5xx from this service
would be taken by Envoy as the service failing, and under ``failOpen`` pass the
client's own token upstream. Failures are not cached: the next request tries again.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import structlog

from ext_authz.errors import ForbiddenError, UnavailableError
from ext_authz.swap.exchange import ExchangeFailed, TokenExchange
from ext_authz.swap.signer import UpstreamSigner
from servicekit.protos.gatehouse.policy.v1 import policy_pb2
from servicekit.check_contract import UPSTREAM_TOKEN_UNAVAILABLE_HEADER as UNAVAILABLE_HEADER

log = structlog.get_logger(component="ext_authz.swap.tokens")

UNAVAILABLE_STATUS = 424
"""Not 5xx, so Envoy passes this denial on; the local reply mapper makes it a 503."""
REUSE_MARGIN_SECONDS = 10.0
REUSE_MARGIN_FRACTION = 0.25
"""A token is reused until min(10 s, a quarter of its lifetime) before it expires."""

Key = tuple[bytes, str, str]


@dataclass(frozen=True, slots=True)
class SwapRule:
    """A route's ``upstreamToken`` as the control plane sent it."""

    audience: str
    exchange_url: str = ""


def swap_rule(policy: policy_pb2.RoutePolicy) -> SwapRule | None:
    if not policy.HasField("upstream_token"):
        return None
    return SwapRule(policy.upstream_token.audience, policy.upstream_token.exchange_url)


def swap_refusal(policy: policy_pb2.RoutePolicy, tokens: UpstreamTokens | None) -> str | None:
    """Why this process will not serve the route's swap (None: it will, or it swaps nothing)."""
    rule = swap_rule(policy)
    if rule is None:
        return None
    if tokens is None:
        return "auth.upstreamToken: ext_authz has no http.upstreamTokens"
    # The route's namespace, as its source vouches for it: the control plane serves a Git
    # route only in a namespace its repo is bound to (control_plane/model/namespace_binding.py).
    namespace = policy.route.partition("/")[0]
    reason = tokens.refuses(rule, namespace)
    return None if reason is None else f"auth.upstreamToken: {reason}"


class UpstreamTokenUnavailable(UnavailableError):
    status = UNAVAILABLE_STATUS
    error = "upstream_token_unavailable"


def unavailable_parts(error: UpstreamTokenUnavailable, request_id: str) -> tuple[int, list[tuple[str, str]], bytes]:
    body = json.dumps(
        {"error": {"code": error.error, "reason": error.reason, "message": error.message, "request_id": request_id}},
        separators=(",", ":"),
    ).encode()
    headers = [
        ("content-type", "application/json"),
        ("cache-control", "no-store"),
        ("retry-after", "1"),
        (UNAVAILABLE_HEADER, "unavailable"),
    ]
    return error.status, headers, body


def _reuse_until(now: float, expires_at: float, client_expires_at: float) -> float:
    """Shortly before the token's exp; but a token capped at the client token's exp is kept
    to the end (a new one could not live longer), and nothing outlives the client token."""
    if expires_at >= client_expires_at:
        return client_expires_at
    lifetime = expires_at - now
    return expires_at - min(REUSE_MARGIN_SECONDS, lifetime * REUSE_MARGIN_FRACTION)


@dataclass(frozen=True, slots=True)
class SwapGrants:
    """What routes may ask of token swap: the audiences by namespace (``*``: any) and the
    exchange endpoints. The route's own fields are free text its author writes; this is
    the operator's list, so a route cannot mint tokens for another service's audience nor
    send clients' tokens to a URL of its choosing."""

    audiences: Mapping[str, frozenset[str]]
    endpoints: frozenset[str]

    def refuses(self, rule: SwapRule, namespace: str) -> str | None:
        allowed = self.audiences.get(namespace, frozenset()) | self.audiences.get("*", frozenset())
        if rule.audience not in allowed:
            return (
                f"audience {rule.audience!r} is not one routes in namespace {namespace!r} may ask for "
                f"(ext_authz http.upstreamTokens.audiences)"
            )
        if rule.exchange_url and rule.exchange_url not in self.endpoints:
            return f"exchange url {rule.exchange_url[:200]!r} is not a listed endpoint (ext_authz http.upstreamTokens.exchange.endpoints)"
        return None


NO_GRANTS = SwapGrants({}, frozenset())


class UpstreamTokens:
    def __init__(
        self,
        *,
        signer: UpstreamSigner | None,
        exchange: TokenExchange | None,
        ttl: float,
        cache_size: int,
        grants: SwapGrants = NO_GRANTS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.signer = signer
        self.grants = grants
        self._exchange = exchange
        self._ttl = ttl
        self._size = cache_size
        self._clock = clock
        self._lines: dict[Key, tuple[bytes, float]] = {}
        self._inflight: dict[Key, asyncio.Future[tuple[bytes, float]]] = {}

    def refuses(self, rule: SwapRule, namespace: str) -> str | None:
        """Why this process will not serve the rule for a route in ``namespace`` (None if it
        will): it may not, or it cannot."""
        if not rule.exchange_url and self.signer is None:
            return "needs a signed token and http.upstreamTokens has no keyFile"
        if rule.exchange_url and self._exchange is None:
            return "needs a token exchange and this process has no exchange client"
        return self.grants.refuses(rule, namespace)

    def cached(self, rule: SwapRule, token_hash: bytes) -> bytes | None:
        """The warm path: the line still fit for reuse, or None (then ``line``)."""
        cached = self._lines.get((token_hash, rule.audience, rule.exchange_url))
        if cached is not None and cached[1] > self._clock():
            return cached[0]
        return None

    async def line(self, rule: SwapRule, token_hash: bytes, subject: str, client_expires_at: float, client_token: str) -> bytes:
        """``authorization: Bearer <upstream token>\\r\\n``; UpstreamTokenUnavailable if none
        can be had now, ForbiddenError (403) for a token without ``sub`` to sign for."""
        key = (token_hash, rule.audience, rule.exchange_url)
        cached = self._lines.get(key)
        if cached is not None and cached[1] > self._clock():
            return cached[0]
        if not rule.exchange_url:
            if not subject:
                raise ForbiddenError("no_subject", "the token has no subject to pass to this route's upstream")
            return self._store(key, self._signed(rule, subject, client_expires_at))
        pending = self._inflight.get(key)
        if pending is None:
            pending = self._inflight[key] = asyncio.ensure_future(self._exchanged(rule, client_token, client_expires_at))
            pending.add_done_callback(lambda done: self._settled(key, done))
        return self._store(key, await asyncio.shield(pending))

    def _settled(self, key: Key, done: asyncio.Future[tuple[bytes, float]]) -> None:
        """The call is over: the next miss makes a new one. An exchange whose callers all
        went away (Envoy gave up on the checks) still caches its token for the next one."""
        self._inflight.pop(key, None)
        if not done.cancelled() and done.exception() is None:
            self._store(key, done.result())

    def _store(self, key: Key, entry: tuple[bytes, float]) -> bytes:
        if len(self._lines) >= self._size:
            for old in list(itertools.islice(self._lines, max(1, self._size // 2))):
                del self._lines[old]
        self._lines[key] = entry
        return entry[0]

    def _signed(self, rule: SwapRule, subject: str, client_expires_at: float) -> tuple[bytes, float]:
        assert self.signer is not None  # refused at NACK time otherwise
        now = self._clock()
        expires_at = int(min(now + self._ttl, client_expires_at))
        token = self.signer.sign(subject, rule.audience, int(now), expires_at)
        return b"authorization: Bearer " + token.encode("ascii") + b"\r\n", _reuse_until(now, expires_at, client_expires_at)

    async def _exchanged(self, rule: SwapRule, client_token: str, client_expires_at: float) -> tuple[bytes, float]:
        assert self._exchange is not None
        try:
            answer = await self._exchange.exchange(rule.exchange_url, client_token, rule.audience)
        except ExchangeFailed as exc:
            log.warning("upstream_token_exchange_failed", audience=rule.audience[:200], reason=exc.reason, detail=str(exc))
            raise UpstreamTokenUnavailable(exc.reason, "the upstream's credential could not be obtained; retry later") from None
        now = self._clock()
        expires_at = now + (answer.expires_in if answer.expires_in is not None else self._ttl)
        line = b"authorization: Bearer " + answer.access_token.encode("ascii") + b"\r\n"
        return line, _reuse_until(now, expires_at, client_expires_at)
