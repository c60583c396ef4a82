"""Revoked tokens and blocked subjects: one instance's mirror of Redis, checked with no round trip.

Every ext_authz instance keeps both sets in memory (``RevocationSet``,
``entries.py``), fed by the pub/sub channel (a write reaches every instance within
milliseconds) and repaired by a full SCAN every ``resyncInterval`` plus after every
(re)subscription. The Redis layout is documented in ``store.py``.

This module is the I/O loop: subscribe, resync, listen, PING every ``heartbeat``. Any
failure (a dropped connection, a missed pong, a failed scan, a timeout) makes the mirror
*degraded*; it then reconnects with exponential back-off (with jitter, up to
``max_backoff``), resubscribes, resyncs, and is in sync again: no restart needed. What a
check answers meanwhile, per ``revocation.onUnavailable``, is ``policy.py``.

The admin side writes through the mirror (``revoke``/``block``/``unblock``, validated by
``ext_authz/admin/inputs.py``): Redis first, then the local mirror at once.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from ext_authz import metrics
from ext_authz.admin.inputs import validate_expiry, validate_identifier
from ext_authz.config import Revocation
from ext_authz.errors import ForbiddenError, RevokedError, StoreUnavailable, UnavailableError
from ext_authz.revocation.policy import MirrorState, Policy, State
from ext_authz.revocation.entries import ApiKey, Change, Entry, Kind, RevocationSet, Verdict
from ext_authz.revocation.store import PONG, RedisRevocationStore, RevocationStore, Subscription

__all__ = ["MirrorStats", "RevocationMirror"]

log = structlog.get_logger(component="revocation")


@dataclass(frozen=True, slots=True)
class MirrorStats:
    state: State
    reason: str
    synced_at: float | None
    lag_seconds: float | None
    revoked: int
    blocked: int
    messages: int
    resyncs: int
    resync_failures: int
    repairs: int
    reconnects: int
    api_keys: int = 0


class RevocationMirror:
    """One instance's mirror: ``start()`` it, ``check()`` per request, ``stop()`` at exit.

    The admin side writes through it (``revoke``/``block``/``unblock``): Redis first (a
    failure raises ``StoreUnavailable``), then the local mirror at once; the other
    instances learn of it over pub/sub.
    """

    def __init__(
        self,
        store: RevocationStore,
        *,
        policy: Policy = "closed",
        last_known_for: float = 60.0,
        resync_interval: float = 10.0,
        heartbeat: float = 1.0,
        stale_after: float | None = None,
        grace: float = 300.0,
        min_backoff: float = 0.1,
        max_backoff: float = 2.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._clock = clock
        self._resync_interval = resync_interval
        self._heartbeat = heartbeat
        self._min_backoff = min_backoff
        self._max_backoff = max_backoff
        self._state = MirrorState(
            policy=policy,
            last_known_for=last_known_for,
            stale_after=stale_after if stale_after is not None else 3 * heartbeat + 1.0,
            grace=grace,
        )
        self._journal: list[Change] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._ready = asyncio.Event()
        self._failing = False
        self._stopping = False
        self._messages = 0
        self._resyncs = 0
        self._resync_failures = 0
        self._repairs = 0
        self._reconnects = 0
        self._publish_state()

    @classmethod
    def from_config(
        cls,
        config: Revocation,
        *,
        grace: float = 300.0,
        heartbeat: float = 1.0,
        min_backoff: float = 0.1,
        max_backoff: float = 2.0,
    ) -> RevocationMirror:
        """A mirror on Redis as ``revocation:`` configures it (durations are ms there).

        ``grace`` must be at least the largest issuer leeway (seconds).
        """
        store = RedisRevocationStore(url=config.redis_url, key_prefix=config.key_prefix, timeout=config.timeout.seconds)
        return cls(
            store,
            policy=config.on_unavailable,
            last_known_for=config.last_known_for.seconds,
            resync_interval=config.resync_interval.seconds,
            grace=grace,
            heartbeat=heartbeat,
            min_backoff=min_backoff,
            max_backoff=max_backoff,
        )

    # ---- the hot path --------------------------------------------------------------

    def check(self, jti: str | None, subject: str, now: float) -> Verdict:
        """Synchronous, no I/O: see ``policy.py`` for the exact semantics."""
        return self._state.check(jti, subject, now)

    def enforce(self, jti: str | None, subject: str, now: float) -> None:
        """``check`` as exceptions: RevokedError (401), ForbiddenError (403), UnavailableError (503)."""
        verdict = self._state.check(jti, subject, now)
        if verdict is Verdict.OK:
            return
        if verdict is Verdict.REVOKED:
            raise RevokedError("revoked", "the token has been revoked")
        if verdict is Verdict.BLOCKED:
            raise ForbiddenError("blocked", "the account is blocked")
        raise UnavailableError("revocation_unavailable", "revocation data is temporarily unavailable")

    def api_key(self, key_hash: bytes, now: float) -> ApiKey | None:
        """The API key with this sha256, or None; UnavailableError (503) when the mirror may
        not decide (``revocation.onUnavailable``, as for revocations). Synchronous, no I/O."""
        if not self._state.usable(now):
            raise UnavailableError("revocation_unavailable", "the API key store is temporarily unavailable")
        return self._state.entries.api_key(key_hash)

    # ---- status --------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """The first full sync is done."""
        return self._state.ready

    @property
    def state(self) -> State:
        return self._state.state

    @property
    def policy(self) -> Policy:
        return self._state.policy

    @property
    def synced_at(self) -> float | None:
        return self._state.synced_at

    def stats(self) -> MirrorStats:
        now = self._clock()
        return MirrorStats(
            state=self._state.state,
            reason=self._state.reason,
            synced_at=self._state.synced_at,
            lag_seconds=self._state.lag(now),
            revoked=len(self._state.entries.revoked),
            blocked=len(self._state.entries.blocked),
            messages=self._messages,
            resyncs=self._resyncs,
            resync_failures=self._resync_failures,
            repairs=self._repairs,
            reconnects=self._reconnects,
            api_keys=len(self._state.entries.api_keys),
        )

    async def wait_ready(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the first full sync."""
        try:
            async with asyncio.timeout(timeout):
                await self._ready.wait()
        except TimeoutError:
            return False
        return True

    # ---- lifecycle -----------------------------------------------------------------

    async def start(self) -> None:
        if self._tasks:
            return
        self._stopping = False
        self._tasks = [
            asyncio.create_task(self._run(), name="revocation-mirror"),
            asyncio.create_task(self._housekeeping(), name="revocation-housekeeping"),
        ]

    async def stop(self) -> None:
        self._stopping = True
        tasks, self._tasks = self._tasks, []
        while tasks:  # cancel again if a cancellation got lost in a race with an error
            for task in tasks:
                task.cancel()
            _, pending = await asyncio.wait(tasks, timeout=1.0)
            tasks = list(pending)
        await self._store.close()

    # ---- the admin side ------------------------------------------------------------

    async def revoke(self, jti: str, expires_at: float) -> Entry:
        """Revoke ``jti`` until the token's ``exp`` (``expires_at``, Unix seconds)."""
        validate_identifier("jti", jti)
        validate_expiry("expires_at", expires_at, self._clock())
        await self._store.revoke(jti, expires_at, expires_at + self._state.entries.grace)
        entry = Entry("jti", jti, expires_at)
        self._apply(Change("revoke", entry))
        return entry

    async def block(self, subject: str, until: float | None) -> Entry:
        """Block ``subject`` until ``until`` (Unix seconds), or for good with None."""
        validate_identifier("subject", subject)
        if until is not None:
            validate_expiry("until", until, self._clock())
        await self._store.block(subject, until)
        entry = Entry("sub", subject, until)
        self._apply(Change("block", entry))
        return entry

    async def unblock(self, subject: str) -> bool:
        """Lift a block; True if there was one in Redis."""
        validate_identifier("subject", subject)
        existed = await self._store.unblock(subject)
        self._apply(Change("unblock", Entry("sub", subject, None)))
        return existed

    async def list(self, kind: Kind | None = None, limit: int | None = None) -> Sequence[Entry]:
        """What Redis holds now (authoritative, not this mirror); raises StoreUnavailable.
        No kind: revocations and blocks (API keys are listed by ``gatehouse apikey list``)."""
        if kind is not None:
            return await self._store.scan(kind, limit)
        entries = await self._store.scan("jti", limit)
        if limit is None or len(entries) < limit:
            entries += await self._store.scan("sub", None if limit is None else limit - len(entries))
        return entries

    # ---- the sync machinery --------------------------------------------------------

    def _apply(self, change: Change) -> None:
        self._state.entries.apply(change)
        if self._journal is not None:
            self._journal.append(change)

    async def _run(self) -> None:
        delay = self._min_backoff
        while not self._stopping:
            try:
                async with self._store.subscription() as subscription:
                    await self._resync()
                    delay = self._min_backoff
                    async with asyncio.TaskGroup() as group:
                        group.create_task(self._listen(subscription))
                        group.create_task(self._resync_periodically())
            except Exception as exc:  # noqa: BLE001 - any failure: degrade, back off, reconnect
                self._lost(exc)
            self._reconnects += 1
            metrics.REVOCATION_RECONNECTS.inc()
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, self._max_backoff)

    def _lost(self, exc: BaseException) -> None:
        cause = _first_cause(exc)
        reason = str(cause) if isinstance(cause, StoreUnavailable) else f"{type(cause).__name__}: {cause}"
        degraded = self._state.mark_lost(reason)
        if degraded or not self._failing:
            log.warning("revocation_unavailable", state=self._state.state, reason=reason, policy=self._state.policy)
        self._failing = True
        if not isinstance(cause, StoreUnavailable):
            log.error("revocation_unexpected_error", error=reason, exc_info=cause)
        self._publish_state()

    async def _resync(self) -> None:
        started = self._clock()
        self._journal = []
        try:
            entries = await self._store.scan()
        except Exception:
            self._resync_failures += 1
            metrics.REVOCATION_RESYNCS.labels("failure").inc()
            raise
        finally:
            journal, self._journal = self._journal, None
        fresh = RevocationSet(grace=self._state.entries.grace)
        fresh.add(entries, self._clock())
        for change in journal:
            fresh.apply(change)
        repaired = self._state.replace(fresh, self._clock())
        self._resyncs += 1
        metrics.REVOCATION_RESYNCS.labels("success").inc()
        if repaired and self._state.ready:  # the first load repairs nothing
            self._repairs += repaired
            metrics.REVOCATION_REPAIRS.inc(repaired)
            log.info("revocation_resync_repaired", entries=repaired)
        if self._state.mark_synced(started):
            log.info("revocation_in_sync", revoked=len(fresh.revoked), blocked=len(fresh.blocked), api_keys=len(fresh.api_keys))
        self._failing = False
        self._ready.set()
        self._publish_state()

    async def _resync_periodically(self) -> None:
        while True:
            await asyncio.sleep(self._resync_interval)
            await self._resync()

    async def _listen(self, subscription: Subscription) -> None:
        """Apply changes as they come; PING every ``heartbeat``, and a pong must come
        back within another ``heartbeat``, else the subscription is taken for dead.
        """
        loop = asyncio.get_running_loop()
        next_ping = loop.time() + self._heartbeat
        ping_sent: float | None = None
        ping_wall = 0.0
        while True:
            if ping_sent is None and loop.time() >= next_ping:
                ping_wall = self._clock()
                await subscription.ping()
                ping_sent = loop.time()
            deadline = ping_sent + self._heartbeat if ping_sent is not None else next_ping
            item = await subscription.receive(max(0.0, deadline - loop.time()))
            if item == PONG:
                if ping_sent is not None:
                    # Everything published before the PING has arrived before its pong.
                    self._state.mark_synced(ping_wall)
                    ping_sent = None
                    next_ping = loop.time() + self._heartbeat
            elif isinstance(item, Change):
                self._apply(item)
                self._messages += 1
                metrics.REVOCATION_MESSAGES.labels(item.op).inc()
            if ping_sent is not None and loop.time() - ping_sent > self._heartbeat:
                raise StoreUnavailable(f"no pong within {self._heartbeat:g}s", operation="heartbeat", reason="no_pong")

    async def _housekeeping(self) -> None:
        """Drop lapsed entries and refresh the gauges, once a second."""
        while True:
            await asyncio.sleep(min(1.0, self._heartbeat))
            self._state.entries.purge(self._clock())
            self._publish_state()

    def _publish_state(self) -> None:
        state = self._state
        for name in ("syncing", "in_sync", "degraded"):
            metrics.REVOCATION_STATE.labels(name).set(1 if state.state == name else 0)
        metrics.REVOCATION_ENTRIES.labels("jti").set(len(state.entries.revoked))
        metrics.REVOCATION_ENTRIES.labels("sub").set(len(state.entries.blocked))
        metrics.REVOCATION_ENTRIES.labels("key").set(len(state.entries.api_keys))
        lag = state.lag(self._clock())
        metrics.REVOCATION_LAG.set(lag if lag is not None else math.nan)


def _first_cause(exc: BaseException) -> BaseException:
    """The first leaf of a (nested) exception group; ``exc`` itself otherwise."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
