"""Where revocations live: the Redis layout, the pub/sub wire format, and the Redis I/O.

Layout (``prefix`` is ``revocation.keyPrefix``, default ``gatehouse:``)::

    {prefix}revoked:jti:<jti>     value {"exp": <token exp>}       expires at exp + grace (PXAT)
    {prefix}blocked:sub:<sub>     value {"until": <unix s>|null}   expires at until; null: no TTL
    {prefix}apikey:<key id>       value {"hash": "<sha256 hex>", "consumer": "...", "created": <unix s>[, "source": ...]}
                                  no TTL; never the key itself; written by ``servicekit/api_key_store.py``
    {prefix}revocations           pub/sub channel, one small JSON message per write:
        {"op": "revoke", "jti": "...", "exp": 1700000000}
        {"op": "block", "sub": "...", "until": 1700000000}     (until null: permanent)
        {"op": "unblock", "sub": "..."}
        {"op": "key", "id": "...", "hash": "...", "consumer": "...", "created": 1700000000}
        {"op": "unkey", "id": "...", "hash": "...", "consumer": "...", "created": 1700000000}

Every write is one MULTI/EXEC transaction: the SET (or DEL) and its PUBLISH. Every Redis
call is bounded by ``timeout``; failures of any kind surface as ``StoreUnavailable``
(``errors.py``; mapped from redis and socket errors in ``error_mapping.py``).

The mirror (``mirror.py``) depends only on the ``RevocationStore`` and
``Subscription`` protocols; ``RedisRevocationStore`` is the one real implementation. The
values stored and sent (``Entry``, ``Change``) are ``entries.py``'s.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Final, Literal, Protocol

import structlog
from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.backoff import NoBackoff
from redis.retry import Retry

from ext_authz.error_mapping import REDIS_ERRORS, redis_errors
from ext_authz.revocation.entries import Change, Entry, Kind
from servicekit.api_key_store import decode_key, key_message, key_prefix

log = structlog.get_logger(component="revocation")

_SCAN_BATCH = 500


PONG: Final = "pong"
"""What ``Subscription.receive`` returns for the answer to ``Subscription.ping``."""


class Subscription(Protocol):
    async def receive(self, timeout: float) -> Change | Literal["pong"] | None:
        """The next change or pong, or None after ``timeout`` seconds of silence."""

    async def ping(self) -> None:
        """Ask for a pong on the subscription's own connection (proves it is alive)."""


class RevocationStore(Protocol):
    def subscription(self) -> AbstractAsyncContextManager[Subscription]:
        """``async with store.subscription() as sub``: subscribed (confirmed) on entry."""

    async def scan(self, kind: Kind | None = None, limit: int | None = None) -> list[Entry]:
        """Every entry (of ``kind``), at most ``limit``; raises StoreUnavailable."""

    async def revoke(self, jti: str, exp: float, keep_until: float) -> None: ...

    async def block(self, subject: str, until: float | None) -> None: ...

    async def unblock(self, subject: str) -> bool:
        """True if a block existed."""

    async def close(self) -> None: ...


class Keys:
    """Key and channel names under one prefix."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.revoked = f"{prefix}revoked:jti:"
        self.blocked = f"{prefix}blocked:sub:"
        self.api_keys = key_prefix(prefix)
        self.channel = f"{prefix}revocations"
        self._bases: dict[Kind, str] = {"jti": self.revoked, "sub": self.blocked, "key": self.api_keys}

    def key(self, kind: Kind, value: str) -> str:
        return self._bases[kind] + value

    def pattern(self, kind: Kind) -> str:
        """A SCAN MATCH pattern; glob characters in the prefix are escaped."""
        base = self._bases[kind]
        return "".join("\\" + c if c in "*?[]\\" else c for c in base) + "*"


def encode_change(change: Change) -> str:
    entry = change.entry
    if entry.api_key is not None:
        return key_message(change.op, entry.api_key)
    if change.op == "revoke":
        return json.dumps({"op": "revoke", "jti": entry.value, "exp": entry.expires_at})
    if change.op == "block":
        return json.dumps({"op": "block", "sub": entry.value, "until": entry.expires_at})
    return json.dumps({"op": "unblock", "sub": entry.value})


def decode_change(data: bytes | str) -> Change:
    """Parse one pub/sub message; raises ValueError for anything malformed."""
    message = json.loads(data)
    if not isinstance(message, dict):
        raise ValueError("not an object")
    op = message.get("op")
    if op == "revoke":
        return Change("revoke", Entry("jti", _text(message, "jti"), _time(message, "exp")))
    if op == "block":
        until = message.get("until")
        return Change("block", Entry("sub", _text(message, "sub"), None if until is None else _time(message, "until")))
    if op == "unblock":
        return Change("unblock", Entry("sub", _text(message, "sub"), None))
    if op in ("key", "unkey"):
        key = decode_key(message)
        return Change("key" if op == "key" else "unkey", Entry("key", key.key_id, None, key))
    raise ValueError(f"unknown op {op!r}")


def _text(message: dict[str, Any], field: str) -> str:
    value = message.get(field)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{field} must be a non-empty string")
    return value


def _time(message: dict[str, Any], field: str) -> float:
    value = message.get(field)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{field} must be a number")
    return float(value)


def _stored_time(kind: Kind, raw: bytes) -> float | None:
    """The expiry kept in a key's value; raises ValueError if malformed."""
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("not an object")
    if kind == "jti":
        return _time(data, "exp")
    return None if data.get("until") is None else _time(data, "until")


class _RedisSubscription:
    def __init__(self, pubsub: PubSub, timeout: float) -> None:
        self._pubsub = pubsub
        self._timeout = timeout

    async def receive(self, timeout: float) -> Change | Literal["pong"] | None:
        with redis_errors("receive", "subscription lost"):
            async with asyncio.timeout(timeout + self._timeout):
                message = await self._pubsub.get_message(timeout=timeout)
        if message is None:
            return None
        kind = message.get("type")
        if kind == "pong":
            return PONG
        if kind != "message":
            return None
        try:
            return decode_change(message["data"])
        except (ValueError, UnicodeDecodeError) as exc:
            log.warning("revocation_bad_message", error=str(exc))
            return None

    async def ping(self) -> None:
        with redis_errors("ping", "subscription ping failed"):
            async with asyncio.timeout(self._timeout):
                await self._pubsub.ping()


class RedisRevocationStore:
    """The Redis implementation. Two clients: commands (one retry on a dropped connection)
    and pub/sub (no retry: a dropped subscription must be seen, so that a resync follows).
    """

    def __init__(self, *, url: str, key_prefix: str = "gatehouse:", timeout: float = 0.25) -> None:
        self.keys = Keys(key_prefix)
        self.timeout = timeout
        options: dict[str, Any] = {
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            "decode_responses": False,
        }
        self._redis = Redis.from_url(url, retry=Retry(NoBackoff(), 1), **options)
        self._pubsub_redis = Redis.from_url(url, retry=Retry(NoBackoff(), 0), **options)

    @asynccontextmanager
    async def subscription(self) -> AsyncIterator[Subscription]:
        pubsub = self._pubsub_redis.pubsub()
        try:
            with redis_errors("subscribe", "cannot subscribe"):
                async with asyncio.timeout(self.timeout * 4):
                    await pubsub.subscribe(self.keys.channel)
                    while True:  # wait for the confirmation: from here on nothing is missed
                        message = await pubsub.get_message(timeout=self.timeout)
                        if message is not None and message.get("type") == "subscribe":
                            break
            yield _RedisSubscription(pubsub, self.timeout)
        finally:
            try:
                async with asyncio.timeout(self.timeout):
                    await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]  # typed from redis 8
            except REDIS_ERRORS:
                pass

    async def scan(self, kind: Kind | None = None, limit: int | None = None) -> list[Entry]:
        kinds: Sequence[Kind] = ("jti", "sub", "key") if kind is None else (kind,)
        entries: list[Entry] = []
        with redis_errors("scan", "scan failed"):
            for each in kinds:
                if await self._scan_kind(each, entries, limit):
                    break
        return entries

    async def _scan_kind(self, kind: Kind, into: list[Entry], limit: int | None) -> bool:
        """Append ``kind``'s entries to ``into``; True once ``limit`` is reached."""
        base = self.keys.key(kind, "").encode()
        cursor = 0
        while True:
            async with asyncio.timeout(self.timeout):
                cursor, keys = await self._redis.scan(cursor, match=self.keys.pattern(kind), count=_SCAN_BATCH)
                values = await self._redis.mget(keys) if keys else []
            for key, raw in zip(keys, values, strict=True):
                if not isinstance(raw, bytes) or not isinstance(key, bytes):
                    continue  # expired or deleted between SCAN and MGET
                value = key[len(base) :].decode(errors="replace")
                try:
                    if kind == "key":
                        into.append(Entry(kind, value, None, decode_key(json.loads(raw), value)))
                    else:
                        into.append(Entry(kind, value, _stored_time(kind, raw)))
                except (ValueError, UnicodeDecodeError, TypeError):
                    log.warning("revocation_bad_entry", key=key[:300].decode(errors="replace"))
                    continue
                if limit is not None and len(into) >= limit:
                    return True
            if cursor == 0:
                return False

    async def revoke(self, jti: str, exp: float, keep_until: float) -> None:
        change = Change("revoke", Entry("jti", jti, exp))
        await self._write(change, json.dumps({"exp": exp}), keep_until)

    async def block(self, subject: str, until: float | None) -> None:
        change = Change("block", Entry("sub", subject, until))
        await self._write(change, json.dumps({"until": until}), until)

    async def _write(self, change: Change, value: str, expires_at: float | None) -> None:
        key = self.keys.key(change.entry.kind, change.entry.value)
        with redis_errors(change.op, f"{change.op} failed"):
            async with asyncio.timeout(self.timeout):
                async with self._redis.pipeline(transaction=True) as pipe:
                    if expires_at is None:
                        pipe.set(key, value)
                    else:
                        pipe.set(key, value, pxat=math.ceil(expires_at * 1000))
                    pipe.publish(self.keys.channel, encode_change(change))
                    await pipe.execute()

    async def unblock(self, subject: str) -> bool:
        change = Change("unblock", Entry("sub", subject, None))
        with redis_errors("unblock", "unblock failed"):
            async with asyncio.timeout(self.timeout):
                async with self._redis.pipeline(transaction=True) as pipe:
                    pipe.delete(self.keys.key("sub", subject))
                    pipe.publish(self.keys.channel, encode_change(change))
                    deleted, _ = await pipe.execute()
        return bool(deleted)

    async def close(self) -> None:
        for client in (self._redis, self._pubsub_redis):
            try:
                async with asyncio.timeout(self.timeout):
                    await client.aclose()
            except REDIS_ERRORS:
                pass
