"""API keys as stored: the record, its Redis layout and wire form, and the writer.

In the kernel because three parts share it: ext_authz reads the keys (its revocation
mirror, ``ext_authz/revocation/store.py``), the control plane writes the keys of
Kubernetes Secrets (``control_plane/sources/kubernetes/api_key_secrets.py``), and the CLI
writes the rest (``gatehouse apikey``). Never the key itself: only its sha256.

    {prefix}apikey:<key id>   {"hash": "<sha256 hex>", "consumer": "...", "created": <unix s>[, "source": "..."]}
    {prefix}revocations       the revocation channel; one message per write:
        {"op": "key" | "unkey", "id": "...", "hash": "...", "consumer": "...", "created": ...[, "source": ...]}

Every write is one transaction with its PUBLISH; every call is bounded by ``timeout``; a
Redis failure of any kind is ``KeyStoreUnavailable`` and changes nothing.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Final

from redis.asyncio import Redis
from redis.exceptions import RedisError

CONSUMER: Final = re.compile(r"[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?")
"""A consumer's name, as ``control_plane/model/api_keys.py`` defines it (a test keeps them
equal): it becomes a header value upstream, so nothing else may pass."""
_SCAN_BATCH = 500
_REDIS_ERRORS = (RedisError, OSError, TimeoutError)


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One API key as stored: never the key, only its sha256 (``key_hash``)."""

    key_id: str
    """The key's non-secret id (also in the key's visible prefix)."""
    consumer: str
    key_hash: bytes
    created: float
    source: str = ""
    """Where it was made: empty for ``gatehouse apikey create``; ``kubernetes:<ns>/<name>``
    for a key synced from a Secret (only those does the sync remove)."""


class KeyStoreUnavailable(Exception):
    """Redis did not answer (in time); nothing was changed. The message is safe to log."""


def key_prefix(prefix: str) -> str:
    return f"{prefix}apikey:"


def channel(prefix: str) -> str:
    """The revocation channel: keys travel with revocations, so one mirror follows both."""
    return f"{prefix}revocations"


def encode_key(key: ApiKey) -> dict[str, Any]:
    encoded: dict[str, Any] = {"id": key.key_id, "hash": key.key_hash.hex(), "consumer": key.consumer, "created": key.created}
    return {**encoded, "source": key.source} if key.source else encoded


def key_message(op: str, key: ApiKey) -> str:
    """The channel message of a ``key`` (added) or ``unkey`` (removed)."""
    return json.dumps({"op": op, **encode_key(key)})


def _text(data: dict[str, Any], field: str) -> str:
    value = data.get(field)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{field} must be a non-empty string")
    return value


def decode_key(data: dict[str, Any], key_id: str | None = None) -> ApiKey:
    """An ``ApiKey`` from its stored value (``key_id`` from the Redis key) or its message;
    ValueError if malformed."""
    key_hash = bytes.fromhex(_text(data, "hash"))
    if len(key_hash) != 32:
        raise ValueError("hash must be a sha256 in hex")
    consumer = _text(data, "consumer")
    if not CONSUMER.fullmatch(consumer):
        raise ValueError("consumer is not a consumer name")
    created = data.get("created")
    if isinstance(created, bool) or not isinstance(created, (int, float)) or not math.isfinite(created):
        raise ValueError("created must be a number")
    source = data.get("source", "")
    if not isinstance(source, str):
        raise ValueError("source must be a string")
    return ApiKey(key_id or _text(data, "id"), consumer, key_hash, float(created), source)


class RedisApiKeys:
    """Write and list keys on one Redis client (the caller owns and closes it)."""

    def __init__(self, redis: Redis, *, prefix: str = "gatehouse:", timeout: float = 0.25) -> None:
        self._redis = redis
        self._base = key_prefix(prefix)
        self._channel = channel(prefix)
        self._timeout = timeout

    async def scan_keys(self) -> list[ApiKey]:
        """Every stored key; malformed values are skipped."""
        pattern = "".join("\\" + c if c in "*?[]\\" else c for c in self._base) + "*"
        keys: list[ApiKey] = []
        cursor = 0
        try:
            while True:
                async with asyncio.timeout(self._timeout):
                    cursor, names = await self._redis.scan(cursor, match=pattern, count=_SCAN_BATCH)
                    values = await self._redis.mget(names) if names else []
                for name, raw in zip(names, values, strict=True):
                    if not isinstance(raw, bytes) or not isinstance(name, bytes):
                        continue
                    try:
                        keys.append(decode_key(json.loads(raw), name[len(self._base) :].decode()))
                    except (ValueError, TypeError, UnicodeDecodeError):
                        continue
                if cursor == 0:
                    return keys
        except _REDIS_ERRORS as exc:
            raise KeyStoreUnavailable(f"listing keys failed: {type(exc).__name__}: {exc}"[:300]) from exc

    async def add_key(self, key: ApiKey) -> None:
        stored = encode_key(key)
        del stored["id"]
        try:
            async with asyncio.timeout(self._timeout):
                async with self._redis.pipeline(transaction=True) as pipe:
                    pipe.set(self._base + key.key_id, json.dumps(stored))
                    pipe.publish(self._channel, key_message("key", key))
                    await pipe.execute()
        except _REDIS_ERRORS as exc:
            raise KeyStoreUnavailable(f"storing the key failed: {type(exc).__name__}: {exc}"[:300]) from exc

    async def remove_key(self, key_id: str) -> ApiKey | None:
        """The key removed (WATCH/GET, then DEL and PUBLISH in one transaction); None if none."""
        name = self._base + key_id
        try:
            async with asyncio.timeout(self._timeout):
                async with self._redis.pipeline(transaction=True) as pipe:
                    await pipe.watch(name)
                    raw = await pipe.get(name)
                    if raw is None:
                        return None
                    key = decode_key(json.loads(raw), key_id)
                    pipe.multi()  # type: ignore[no-untyped-call, unused-ignore]
                    pipe.delete(name)
                    pipe.publish(self._channel, key_message("unkey", key))
                    await pipe.execute()
        except _REDIS_ERRORS as exc:
            raise KeyStoreUnavailable(f"revoking the key failed: {type(exc).__name__}: {exc}"[:300]) from exc
        return key


def redis_api_keys(url: str, *, prefix: str = "gatehouse:", timeout: float = 0.25) -> tuple[RedisApiKeys, Redis]:
    """A writer on its own client (no retries: a failed write is reported, never repeated)."""
    client = Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout, decode_responses=False)
    return RedisApiKeys(client, prefix=prefix, timeout=timeout), client
