"""The API-key Secret sync, on an in-memory key store: what a Secret must hold (each bad
one refused by field, never echoing a value), and the reconcile: Secrets' keys added,
a deleted Secret's key removed, CLI keys left alone, nothing written by a standby."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
import hashlib
from typing import Any

import pytest

from control_plane.sources.kubernetes.api_key_secrets import SECRET_TYPE, ApiKeySecrets, secret_key
from servicekit.api_key_store import ApiKey
from servicekit.audit import MemoryAuditSink
from tests.unit.ext_authz.revocation.fake_store import FakeStore

DIGEST = hashlib.sha256(b"ghk_0a1b2c3d_secret").hexdigest()


def secret(name: str = "apikey-a", **data: str) -> dict[str, Any]:
    fields = {"consumer": "partner-a", "keyId": "0a1b2c3d", "sha256": DIGEST, **data}
    return {
        "type": SECRET_TYPE,
        "metadata": {"name": name, "namespace": "gw", "creationTimestamp": "2026-12-04T20:00:00Z"},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in fields.items() if v != "-"},
    }


def test_a_secret_is_a_key_by_its_hash() -> None:
    key = secret_key(secret())
    assert (key.key_id, key.consumer, key.key_hash.hex(), key.source) == ("0a1b2c3d", "partner-a", DIGEST, "kubernetes:gw/apikey-a")
    assert key.created == 1796414400.0


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"consumer": "-"}, "data.consumer: missing"),
        ({"consumer": "Partner A"}, "data.consumer: 1-63 of a-z 0-9"),
        ({"keyId": "zz"}, "data.keyId: 8 lowercase hex digits"),
        ({"sha256": "not-a-hash"}, "data.sha256: the key's sha256, 64 lowercase hex digits"),
    ],
)
def test_a_bad_secret_is_refused_by_field_without_its_value(data: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        secret_key(secret(**data))
    for value in data.values():
        assert value == "-" or value not in str(caught.value)


def test_a_secret_of_another_type_or_not_base64_is_refused() -> None:
    with pytest.raises(ValueError, match="type: must be gatehouse.io/api-key"):
        secret_key({**secret(), "type": "Opaque"})
    with pytest.raises(ValueError, match="data.keyId: not base64"):
        secret_key({**secret(), "data": {**secret()["data"], "keyId": "%%%"}})


async def test_reconcile_adds_removes_and_leaves_cli_keys_alone() -> None:
    store = FakeStore()
    cli = ApiKey("ffffffff", "partner-z", bytes(32), 1.0)
    stale = ApiKey("eeeeeeee", "partner-y", bytes(32), 1.0, "kubernetes:gw/gone")
    await store.add_key(cli)
    await store.add_key(stale)
    audit = MemoryAuditSink()
    sync = ApiKeySecrets(store, may_write=lambda: True, audit=audit)
    sync.apply({"gw/apikey-a": secret(), "gw/broken": secret("broken", keyId="nothex")})
    assert list(sync.invalid) == ["gw/broken"]
    await sync.reconcile()
    stored = {e.value: e.api_key for e in await store.scan("key")}
    assert set(stored) == {"ffffffff", "0a1b2c3d"}, "the Secret's key added, the gone Secret's removed, the CLI's kept"
    writes = sync.writes
    await sync.reconcile()
    assert sync.writes == writes, "nothing to do is no write"
    sync.apply({"gw/apikey-a": None})
    await sync.reconcile()
    assert {e.value for e in await store.scan("key")} == {"ffffffff"}
    assert [(e.kind, e.subject, e.details["key_id"]) for e in audit.events] == [
        ("apikey.revoked", "partner-y", "eeeeeeee"), ("apikey.created", "partner-a", "0a1b2c3d"), ("apikey.revoked", "partner-a", "0a1b2c3d"),
    ]


async def test_only_the_lease_holder_writes() -> None:
    store = FakeStore()
    leading = False
    sync = ApiKeySecrets(store, may_write=lambda: leading)
    task = asyncio.create_task(sync.run())
    try:
        sync.apply({"gw/apikey-a": secret()})
        await asyncio.sleep(0.1)
        assert await store.scan("key") == [], "a standby writes nothing"
        leading = True
        deadline = time.monotonic() + 3
        while not await store.scan("key"):
            assert time.monotonic() < deadline, "the new leader never wrote"
            await asyncio.sleep(0.02)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
