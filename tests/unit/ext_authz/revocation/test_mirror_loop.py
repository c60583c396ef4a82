"""RevocationMirror's sync machinery against an in-memory store: subscription first,
then resync; changes during a resync survive the swap; outages degrade and recover."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from ext_authz.errors import ForbiddenError, RevokedError, UnavailableError
from ext_authz.errors import InvalidEntry, StoreUnavailable
from ext_authz.revocation.mirror import RevocationMirror
from ext_authz.revocation.policy import Policy
from ext_authz.revocation.entries import Change, Entry, Verdict
from tests.unit.ext_authz.revocation.fake_store import FakeStore

def fast_mirror(store: FakeStore, policy: Policy = "closed", resync_interval: float = 60.0) -> RevocationMirror:
    return RevocationMirror(
        store, policy=policy, resync_interval=resync_interval, grace=0, heartbeat=0.05, min_backoff=0.01, max_backoff=0.05
    )


MirrorFactory = Callable[..., Awaitable[RevocationMirror]]


async def eventually(condition: Callable[[], bool], timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.005)


@pytest.fixture
async def make_mirror() -> AsyncIterator[MirrorFactory]:
    mirrors: list[RevocationMirror] = []

    async def factory(store: FakeStore, policy: Policy = "closed", resync_interval: float = 60.0) -> RevocationMirror:
        mirror = fast_mirror(store, policy, resync_interval)
        mirrors.append(mirror)
        await mirror.start()
        return mirror

    yield factory
    for mirror in mirrors:
        await mirror.stop()


async def test_first_sync_loads_what_the_store_holds(make_mirror: MirrorFactory) -> None:
    store = FakeStore()
    now = time.time()
    store.write(Change("revoke", Entry("jti", "j1", now + 60)), publish=False)
    store.write(Change("block", Entry("sub", "mallory", None)), publish=False)
    mirror = await make_mirror(store)
    assert await mirror.wait_ready(2)
    assert mirror.state == "in_sync"
    assert mirror.check("j1", "alice", time.time()) is Verdict.REVOKED
    assert mirror.check("j2", "mallory", time.time()) is Verdict.BLOCKED
    assert mirror.check("j2", "alice", time.time()) is Verdict.OK


async def test_changes_published_while_the_first_scan_runs_are_kept(make_mirror: MirrorFactory) -> None:
    store = FakeStore()
    store.hold_scans = True
    mirror = await make_mirror(store)
    await store.scan_taken.wait()  # subscribed; the scan has its (empty) snapshot
    store.write(Change("revoke", Entry("jti", "j1", time.time() + 60)))
    store.release_scan.set()
    assert await mirror.wait_ready(2)
    await eventually(lambda: mirror.check("j1", "alice", time.time()) is Verdict.REVOKED)


async def test_changes_during_a_periodic_resync_survive_the_swap(make_mirror: MirrorFactory) -> None:
    store = FakeStore()
    store.write(Change("block", Entry("sub", "bob", None)), publish=False)
    mirror = await make_mirror(store, resync_interval=0.05)
    assert await mirror.wait_ready(2)
    store.scan_taken.clear()
    store.hold_scans = True
    await store.scan_taken.wait()  # a periodic resync holds a snapshot: {bob}
    store.write(Change("block", Entry("sub", "mallory", None)))  # not in the snapshot
    store.write(Change("unblock", Entry("sub", "bob", None)))  # in the snapshot
    await eventually(lambda: mirror.stats().messages == 2)
    store.hold_scans = False
    store.release_scan.set()
    await eventually(lambda: mirror.stats().resyncs >= 3)
    assert mirror.check(None, "mallory", time.time()) is Verdict.BLOCKED
    assert mirror.check(None, "bob", time.time()) is Verdict.OK
    assert mirror.stats().repairs == 0


async def test_resync_repairs_a_missed_message(make_mirror: MirrorFactory) -> None:
    store = FakeStore()
    mirror = await make_mirror(store, resync_interval=0.05)
    assert await mirror.wait_ready(2)
    store.write(Change("revoke", Entry("jti", "quiet", time.time() + 60)), publish=False)
    await eventually(lambda: mirror.check("quiet", "alice", time.time()) is Verdict.REVOKED)
    assert mirror.stats().repairs == 1


async def test_outage_degrades_then_recovers_without_restart(make_mirror: MirrorFactory) -> None:
    store = FakeStore()
    mirror = await make_mirror(store, policy="closed")
    assert await mirror.wait_ready(2)
    store.down = True
    await eventually(lambda: mirror.state == "degraded")
    assert mirror.check("j", "alice", time.time()) is Verdict.UNAVAILABLE
    assert "down" in mirror.stats().reason
    store.write(Change("block", Entry("sub", "mallory", None)), publish=False)  # missed while down
    store.down = False
    await eventually(lambda: mirror.state == "in_sync")
    assert mirror.check(None, "mallory", time.time()) is Verdict.BLOCKED
    assert mirror.stats().reconnects >= 1


async def test_a_silent_subscription_is_taken_for_dead(make_mirror: MirrorFactory) -> None:
    store = FakeStore()
    mirror = await make_mirror(store)
    assert await mirror.wait_ready(2)
    store.mute = True  # pings go unanswered, like a half-open TCP connection
    await eventually(lambda: mirror.state == "degraded")
    assert "no pong" in mirror.stats().reason
    store.mute = False
    await eventually(lambda: mirror.state == "in_sync")


async def test_pongs_keep_synced_at_fresh(make_mirror: MirrorFactory) -> None:
    store = FakeStore()
    mirror = await make_mirror(store)
    assert await mirror.wait_ready(2)
    first = mirror.synced_at
    assert first is not None
    await eventually(lambda: (mirror.synced_at or 0) > first + 0.1)
    lag = mirror.stats().lag_seconds
    assert lag is not None and lag < 0.5


async def test_an_unexpected_error_does_not_end_the_mirror(make_mirror: MirrorFactory) -> None:
    store = FakeStore()
    store.scan_error = RuntimeError("bug")
    mirror = await make_mirror(store)
    await eventually(lambda: mirror.stats().reconnects >= 2)
    assert not mirror.ready and mirror.state == "syncing"
    store.scan_error = None
    assert await mirror.wait_ready(2)


async def test_never_synced_mirror_under_each_policy(make_mirror: MirrorFactory) -> None:
    store = FakeStore()
    store.down = True
    closed = await make_mirror(store, policy="closed")
    opened = await make_mirror(store, policy="open")
    last_known = await make_mirror(store, policy="lastKnown")
    await asyncio.sleep(0.05)
    assert not closed.ready
    assert closed.check("j", "a", time.time()) is Verdict.UNAVAILABLE
    assert opened.check("j", "a", time.time()) is Verdict.OK
    assert last_known.check("j", "a", time.time()) is Verdict.UNAVAILABLE


async def test_writes_apply_locally_and_publish(make_mirror: MirrorFactory) -> None:
    store = FakeStore()
    writer = await make_mirror(store)
    reader = await make_mirror(store)
    assert await writer.wait_ready(2) and await reader.wait_ready(2)
    exp = time.time() + 60
    entry = await writer.revoke("j1", exp)
    assert entry == Entry("jti", "j1", exp)
    assert writer.check("j1", "a", time.time()) is Verdict.REVOKED  # at once, before pub/sub
    await eventually(lambda: reader.check("j1", "a", time.time()) is Verdict.REVOKED)
    await writer.block("mallory", None)
    await eventually(lambda: reader.check(None, "mallory", time.time()) is Verdict.BLOCKED)
    assert await writer.unblock("mallory") is True
    assert await writer.unblock("mallory") is False
    await eventually(lambda: reader.check(None, "mallory", time.time()) is Verdict.OK)
    assert [e.value for e in await writer.list()] == ["j1"]


async def test_writes_validate_and_report_outages(make_mirror: MirrorFactory) -> None:
    store = FakeStore()
    mirror = await make_mirror(store)
    with pytest.raises(InvalidEntry, match="jti: must not be empty"):
        await mirror.revoke("", time.time() + 60)
    with pytest.raises(InvalidEntry, match="expires_at: must be in the future"):
        await mirror.revoke("j1", time.time() - 1)
    with pytest.raises(InvalidEntry, match="until: must be at most one year ahead"):
        await mirror.block("alice", time.time() + 400 * 86400)
    store.down = True
    with pytest.raises(StoreUnavailable):
        await mirror.revoke("j1", time.time() + 60)
    assert mirror.check("j1", "a", time.time()) is not Verdict.REVOKED  # not applied locally


async def test_enforce_raises_the_matching_denials(make_mirror: MirrorFactory) -> None:
    store = FakeStore()
    store.write(Change("revoke", Entry("jti", "j1", time.time() + 60)), publish=False)
    store.write(Change("block", Entry("sub", "mallory", None)), publish=False)
    mirror = await make_mirror(store)
    assert await mirror.wait_ready(2)
    mirror.enforce("j2", "alice", time.time())
    with pytest.raises(RevokedError) as revoked:
        mirror.enforce("j1", "alice", time.time())
    assert (revoked.value.status, revoked.value.reason) == (401, "revoked")
    with pytest.raises(ForbiddenError) as blocked:
        mirror.enforce("j2", "mallory", time.time())
    assert (blocked.value.status, blocked.value.reason) == (403, "blocked")
    store.down = True
    await eventually(lambda: mirror.state == "degraded")
    with pytest.raises(UnavailableError) as unavailable:
        mirror.enforce("j2", "alice", time.time())
    assert unavailable.value.status == 503


async def test_stop_closes_the_store(make_mirror: MirrorFactory) -> None:
    store = FakeStore()
    mirror = fast_mirror(store)
    await mirror.start()
    assert await mirror.wait_ready(2)
    await mirror.stop()
    assert store.closed
