"""An in-memory RevocationStore for the mirror's loop tests: pub/sub, scans that can be
held half-way, an outage switch and a switch that swallows pongs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

from ext_authz.errors import StoreUnavailable
from ext_authz.revocation.entries import ApiKey, Change, Entry, Kind
from ext_authz.revocation.store import PONG


class FakeSubscription:
    def __init__(self, store: FakeStore) -> None:
        self.store = store
        self.queue: asyncio.Queue[Change | Literal["pong"]] = asyncio.Queue()

    async def receive(self, timeout: float) -> Change | Literal["pong"] | None:
        if self.store.down:
            raise StoreUnavailable("subscription lost: down")
        try:
            async with asyncio.timeout(timeout):  # not wait_for: on 3.11 it can swallow a cancel
                return await self.queue.get()
        except TimeoutError:
            if self.store.down:
                raise StoreUnavailable("subscription lost: down") from None
            return None

    async def ping(self) -> None:
        if self.store.down:
            raise StoreUnavailable("ping failed: down")
        if not self.store.mute:
            self.queue.put_nowait(PONG)


class FakeStore:
    def __init__(self) -> None:
        self.data: dict[tuple[Kind, str], Entry] = {}
        self.subscriptions: list[FakeSubscription] = []
        self.down = False
        self.mute = False
        self.scans = 0
        self.scan_error: Exception | None = None
        self.hold_scans = False
        self.scan_taken = asyncio.Event()
        self.release_scan = asyncio.Event()
        self.closed = False

    # the protocol

    @asynccontextmanager
    async def subscription(self) -> AsyncIterator[FakeSubscription]:
        if self.down:
            raise StoreUnavailable("cannot subscribe: down")
        sub = FakeSubscription(self)
        self.subscriptions.append(sub)
        try:
            yield sub
        finally:
            self.subscriptions.remove(sub)

    async def scan(self, kind: Kind | None = None, limit: int | None = None) -> list[Entry]:
        if self.down:
            raise StoreUnavailable("scan failed: down")
        if self.scan_error is not None:
            raise self.scan_error
        self.scans += 1
        snapshot = [e for e in self.data.values() if kind is None or e.kind == kind]
        if self.hold_scans:
            self.scan_taken.set()
            await self.release_scan.wait()
        return snapshot[:limit] if limit is not None else snapshot

    async def revoke(self, jti: str, exp: float, keep_until: float) -> None:
        self._check()
        self.write(Change("revoke", Entry("jti", jti, exp)))

    async def block(self, subject: str, until: float | None) -> None:
        self._check()
        self.write(Change("block", Entry("sub", subject, until)))

    async def unblock(self, subject: str) -> bool:
        self._check()
        existed = ("sub", subject) in self.data
        self.write(Change("unblock", Entry("sub", subject, None)))
        return existed

    async def add_key(self, key: ApiKey) -> None:
        self._check()
        self.write(Change("key", Entry("key", key.key_id, None, key)))

    async def remove_key(self, key_id: str) -> ApiKey | None:
        self._check()
        entry = self.data.get(("key", key_id))
        if entry is None or entry.api_key is None:
            return None
        self.write(Change("unkey", entry))
        return entry.api_key

    async def scan_keys(self) -> list[ApiKey]:
        return [e.api_key for e in await self.scan("key") if e.api_key is not None]

    async def close(self) -> None:
        self.closed = True

    # test controls

    def _check(self) -> None:
        if self.down:
            raise StoreUnavailable("write failed: down")

    def write(self, change: Change, *, publish: bool = True) -> None:
        key = (change.entry.kind, change.entry.value)
        if change.op in ("unblock", "unkey"):
            self.data.pop(key, None)
        else:
            self.data[key] = change.entry
        if publish:
            for sub in self.subscriptions:
                sub.queue.put_nowait(change)
