"""API keys kept as Kubernetes Secrets, synced into the key store every ext_authz mirrors.

A consumer's key is a Secret in the control plane's namespace (``kubernetes.apiKeys``),
holding only the key's sha256 (``gatehouse apikey create --secret`` writes one; the chart
renders them from ``apiKeys.secrets``)::

    apiVersion: v1
    kind: Secret
    type: gatehouse.io/api-key
    metadata: {name: apikey-partner-a-3f9a1c2e, labels: {gatehouse.io/api-key: "true"}}
    stringData: {consumer: partner-a, keyId: 3f9a1c2e, sha256: <64 hex digits>}

The control plane watches the labelled Secrets and writes each into Redis as
``gatehouse apikey create`` would (source ``kubernetes:<namespace>/<name>``), so the key
reaches every instance over the revocation mirror's channel; a deleted Secret's key is
removed the same way, and is refused everywhere within a second. Only the Lease holder
writes (every replica when leader election is off). It reconciles after every change and
every ``RECONCILE_EVERY`` seconds: keys from Secrets that no longer exist are removed,
keys the CLI made are never touched. A malformed Secret is skipped with a log line naming
it, the field and the reason (never a value); the others keep working.

Failure policy: Redis unavailable → nothing is changed, the next reconcile (1 s later)
tries again; the API server unavailable → the watch keeps its last list (``watch.py``),
so keys are neither added nor removed until it is back.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime
import re
from collections.abc import Callable
from typing import Protocol

import structlog

from control_plane.model.api_keys import CONSUMER_PATTERN
from control_plane.sources.kubernetes.watch import Changes, Object
from servicekit.api_key_store import ApiKey, KeyStoreUnavailable
from servicekit.audit import APIKEY_CREATED, APIKEY_REVOKED, AuditEvent, AuditSink, LogAuditSink

log = structlog.get_logger(component="source.kubernetes.api_keys")

LABEL = "gatehouse.io/api-key"
SELECTOR = f"{LABEL}=true"
SECRET_TYPE = "gatehouse.io/api-key"  # noqa: S105 - a Secret type, not a password
SOURCE_PREFIX = "kubernetes:"
RECONCILE_EVERY = 10.0
RETRY_AFTER = 1.0
_CONSUMER = re.compile(CONSUMER_PATTERN)
_KEY_ID = re.compile(r"^[0-9a-f]{8}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class KeyStore(Protocol):
    """``servicekit.api_key_store.RedisApiKeys``, or a test's in-memory twin."""

    async def scan_keys(self) -> list[ApiKey]: ...
    async def add_key(self, key: ApiKey) -> None: ...
    async def remove_key(self, key_id: str) -> ApiKey | None: ...


def _field(obj: Object, name: str) -> str:
    raw = (obj.get("data") or {}).get(name)
    if not isinstance(raw, str) or not raw:
        raise ValueError(f"data.{name}: missing")
    try:
        return base64.b64decode(raw, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise ValueError(f"data.{name}: not base64 of UTF-8 text") from None


def secret_key(obj: Object) -> ApiKey:
    """The key a Secret describes; ValueError naming the field and the rule (no value)."""
    if obj.get("type") != SECRET_TYPE:
        raise ValueError(f"type: must be {SECRET_TYPE}")
    consumer, key_id, digest = _field(obj, "consumer"), _field(obj, "keyId"), _field(obj, "sha256")
    if not _CONSUMER.match(consumer):
        raise ValueError("data.consumer: 1-63 of a-z 0-9 . _ -, starting and ending with a letter or digit")
    if not _KEY_ID.match(key_id):
        raise ValueError("data.keyId: 8 lowercase hex digits (the id in the key's ghk_<id>_ prefix)")
    if not _SHA256.match(digest):
        raise ValueError("data.sha256: the key's sha256, 64 lowercase hex digits")
    meta = obj.get("metadata", {})
    created = 0.0
    stamp = meta.get("creationTimestamp")
    if isinstance(stamp, str):
        created = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    source = f"{SOURCE_PREFIX}{meta.get('namespace', '')}/{meta.get('name', '')}"
    return ApiKey(key_id, consumer, bytes.fromhex(digest), created, source)


class ApiKeySecrets:
    """The labelled Secrets (``apply``, from their watch) and the loop that writes them to
    the key store (``run``) while ``may_write()`` (the Lease is held)."""

    def __init__(self, store: KeyStore, *, may_write: Callable[[], bool], audit: AuditSink | None = None) -> None:
        self._store = store
        self._audit = audit or LogAuditSink()
        self._may_write = may_write
        self._keys: dict[str, ApiKey] = {}
        """Secret namespace/name → the key it describes (valid Secrets only)."""
        self._synced = False
        self._changed = asyncio.Event()
        self.writes = 0
        self.invalid: dict[str, str] = {}

    def apply(self, changes: Changes) -> None:
        for name, obj in changes.items():
            self._keys.pop(name, None)
            self.invalid.pop(name, None)
            if obj is None:
                continue
            try:
                self._keys[name] = secret_key(obj)
            except ValueError as exc:
                self.invalid[name] = str(exc)
                log.warning("api_key_secret_invalid", secret=name, error=str(exc))
        self._synced = True
        self._changed.set()

    def wanted(self) -> dict[str, ApiKey]:
        """Key id → key, from the Secrets; two Secrets naming one key id: the first by name wins."""
        wanted: dict[str, ApiKey] = {}
        for name in sorted(self._keys):
            key = self._keys[name]
            if key.key_id in wanted:
                log.warning("api_key_secret_duplicate", secret=name, key_id=key.key_id)
                continue
            wanted[key.key_id] = key
        return wanted

    async def reconcile(self) -> None:
        """Make the store's Kubernetes keys what the Secrets say; raises KeyStoreUnavailable."""
        wanted = self.wanted()
        stored = {key.key_id: key for key in await self._store.scan_keys()}
        for key_id, key in stored.items():
            if key.source.startswith(SOURCE_PREFIX) and key_id not in wanted:
                await self._store.remove_key(key_id)
                self.writes += 1
                self._emit(APIKEY_REVOKED, key)
        for key_id, key in wanted.items():
            if stored.get(key_id) != key:
                await self._store.add_key(key)
                self.writes += 1
                self._emit(APIKEY_CREATED, key)

    def _emit(self, kind: str, key: ApiKey) -> None:
        """The audit event of a sync write: consumer, key id, the Secret; never the key."""
        details = {"key_id": key.key_id, "source": key.source}
        self._audit.emit(AuditEvent(kind=kind, actor="control_plane", subject=key.consumer, details=details))

    async def run(self) -> None:
        while True:
            try:
                async with asyncio.timeout(RECONCILE_EVERY):
                    await self._changed.wait()
            except TimeoutError:
                pass
            self._changed.clear()
            if not self._synced:
                continue
            if not self._may_write():
                await asyncio.sleep(0.5)  # a standby: write once the Lease is held
                self._changed.set()
                continue
            try:
                await self.reconcile()
            except KeyStoreUnavailable as exc:
                log.warning("api_key_sync_failed", error=str(exc), retry_in=RETRY_AFTER)
                await asyncio.sleep(RETRY_AFTER)
                self._changed.set()
