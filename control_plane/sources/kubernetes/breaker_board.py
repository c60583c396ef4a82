"""One route-breaker board for every control-plane replica, shared through a ConfigMap.

Each replica keeps its own ``BreakerBoard``: its translator reads it and its Envoys follow
it within milliseconds. This module makes the boards agree (``kubernetes.breakerBoard``):

- a move made here (the Lease holder's detector, or an operator on any replica) is
  written to the ConfigMap as a merge patch of its route's key, ``<namespace>.<name>`` (a
  namespace has no dots); moves made meanwhile are coalesced into the next patch;
- every replica watches the ConfigMap and hands each entry to ``BreakerBoard.adopt``,
  which takes it when it is newer (``board.newer``: the later move first) and pushes it
  like a move of its own;
- a replica whose state is newer than the entry it sees writes its own again, so two moves
  made at once on two replicas end on the same (later) one everywhere: a max register;
- the replica that judges (the Lease holder) removes the entries of routes that have had
  no breaker for a minute; every replica then drops its state, so a route created again
  later under the same name starts CLOSED (within that minute it keeps its phase);
- an entry removed or garbled by hand while its route still has a breaker is written
  again by every replica that has moved it.

The Kubernetes source watches the ConfigMap (``watch_path``, ``field_selector``) and feeds
``apply``; it counts as synced only after the first list, so a (re)started replica has the
shared phases before its first snapshot and its Envoys never see an OPEN route CLOSED.

Failure policy: the API server away → every replica serves its own board; moves made
meanwhile stay pending and are written, newest only, once it answers (back-off up to
``BACKOFF_MAX``); peers' moves arrive when the watch resumes. A malformed entry is skipped
with a log line naming its key and the reason.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from typing import Any

import structlog
# Imported here, not through ``client.<Name>``: the lazy import on first use held the
# event loop for 120-190 ms (see leader.py).
from kubernetes.client import CoreV1Api
from prometheus_client import Counter

from control_plane.breakers.board import Actor, BreakerBoard, BreakerState, Phase, newer
from control_plane.sources.kubernetes.shared_config_map import write_keys
from control_plane.sources.kubernetes.watch import Changes

log = structlog.get_logger(component="breaker_board")

BACKOFF_MAX = 10.0
PRUNE_EVERY = 30.0
PRUNE_AFTER = 60.0
_KEY = re.compile(r"^([a-z0-9](?:[-a-z0-9]*[a-z0-9])?)\.([a-z0-9](?:[-a-z0-9.]*[a-z0-9])?)$")

WRITES = Counter(
    "gatehouse_breaker_board_writes_total", "Patches of the shared breaker board (ConfigMap), by outcome", ["outcome"]
)
ADOPTED = Counter("gatehouse_breaker_board_adopted_total", "Breaker states taken from another replica's move")


def entry_key(route_id: str) -> str:
    namespace, _, name = route_id.partition("/")
    return f"{namespace}.{name}"


def route_of(key: str) -> str:
    match = _KEY.match(key)
    if match is None:
        raise ValueError("not <namespace>.<name>")
    return f"{match[1]}/{match[2]}"


def _route_or_none(key: str) -> str | None:
    try:
        return route_of(key)
    except ValueError:
        return None


def encode(state: BreakerState) -> str:
    """The shared part of a state: what a move sets (not the probes this replica counted)."""
    return json.dumps(
        {
            "phase": state.phase.value,
            "since": state.since,
            "actor": state.actor.value,
            "reason": state.reason,
            "generation": state.generation,
            "openUntil": state.open_until,
            "pinned": state.pinned,
        },
        separators=(",", ":"),
    )


def decode(text: str) -> BreakerState:
    """ValueError naming the field when an entry is not what ``encode`` writes."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    try:
        phase, actor = Phase(data["phase"]), Actor(data["actor"])
    except (KeyError, ValueError) as exc:
        raise ValueError(f"phase/actor: {exc}") from None
    since, generation, open_until = data.get("since"), data.get("generation"), data.get("openUntil")
    reason, pinned = data.get("reason", ""), data.get("pinned", False)
    if not isinstance(since, int | float) or isinstance(since, bool):
        raise ValueError("since: must be a number")
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 1:
        raise ValueError("generation: must be a positive integer")
    if open_until is not None and (not isinstance(open_until, int | float) or isinstance(open_until, bool)):
        raise ValueError("openUntil: must be a number or null")
    if phase is Phase.OPEN and open_until is None:
        raise ValueError("openUntil: an OPEN breaker needs one")
    if not isinstance(reason, str) or not isinstance(pinned, bool):
        raise ValueError("reason/pinned: must be a string and a boolean")
    return BreakerState(phase, float(since), actor, reason, generation, float(open_until) if open_until is not None else None, pinned)


class SharedBreakerBoard:
    """The replication of one ``BreakerBoard`` through the ConfigMap ``namespace/name``.

    ``live_routes`` names the routes that have a breaker now (None before the first
    snapshot); ``may_prune`` says whether this replica judges (the Lease holder; every
    replica without leader election), and so prunes."""

    def __init__(
        self,
        core: CoreV1Api,
        board: BreakerBoard,
        *,
        namespace: str,
        name: str,
        live_routes: Callable[[], set[str] | None],
        may_prune: Callable[[], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._core = core
        self._board = board
        self.namespace, self.name = namespace, name
        self._live_routes = live_routes
        self._may_prune = may_prune
        self._clock = clock
        self._missing: dict[str, float] = {}
        """Entries whose route this replica's snapshot lacks: key → since when."""
        self._seen: dict[str, str] = {}
        """The entries the ConfigMap held at the last event: key → text."""
        self._pending: dict[str, str | None] = {}
        """What the next patch sets: key → text, or None to remove the key."""
        self._wake = asyncio.Event()
        self.synced = asyncio.Event()
        self.errors = 0
        board.subscribe(self._moved)

    # -- local moves -> ConfigMap ------------------------------------------------------

    def _moved(self, route_id: str, old: BreakerState, new: BreakerState) -> None:
        if self._board.shared(route_id) is new:
            return  # adopted from the ConfigMap: it is there already
        self._pending[entry_key(route_id)] = encode(new)
        self._wake.set()

    async def run(self) -> None:
        """Write this replica's moves (and the Lease holder's prunes) until cancelled; the
        source runs the watch that feeds ``apply``."""
        backoff = 0.5
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), PRUNE_EVERY)
            except TimeoutError:
                pass
            self._wake.clear()
            self._prune()
            if not self._pending:
                continue
            batch, self._pending = self._pending, {}
            try:
                await asyncio.to_thread(self._write, batch)
            except Exception as exc:  # noqa: BLE001 - API server away: keep the moves, try again
                self.errors += 1
                WRITES.labels("failed").inc()
                self._pending = {**batch, **self._pending}  # newer moves made meanwhile win
                log.warning("breaker_board_write_failed", configmap=f"{self.namespace}/{self.name}",
                            error=str(exc)[:300], retry_in=backoff, pending=len(self._pending))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
                self._wake.set()
                continue
            backoff = 0.5
            WRITES.labels("ok").inc()

    def _write(self, batch: dict[str, str | None]) -> None:
        """One merge patch of the changed keys (None removes one); creates the ConfigMap on
        first use. Runs in a worker thread."""
        write_keys(
            self._core, self.namespace, self.name, batch, labels={"gatehouse.io/breaker-board": "true"},
            about="route circuit breakers' phases, shared by the control-plane replicas; written by them",
        )

    def _prune(self) -> None:
        """The judging replica removes the entries of routes that have had no breaker in
        its snapshots for ``PRUNE_AFTER`` seconds: long enough for every replica's sources
        to agree, so a route another replica already has is never pruned."""
        live = self._live_routes()
        if live is None or not self._may_prune() or not self.synced.is_set():
            return
        now = self._clock()
        for key in list(self._missing):
            if key not in self._seen:
                del self._missing[key]
        for key in self._seen:
            if _route_or_none(key) in live:
                self._missing.pop(key, None)
            elif now - self._missing.setdefault(key, now) >= PRUNE_AFTER and key not in self._pending:
                self._pending[key] = None

    # -- ConfigMap -> board ------------------------------------------------------------

    def apply(self, changes: Changes) -> None:
        """The watch's batch (on the loop): the ConfigMap as it is now, or None if deleted."""
        obj = changes.get(f"{self.namespace}/{self.name}")
        data: dict[str, Any] = (obj or {}).get("data") or {}
        entries = {k: v for k, v in data.items() if isinstance(v, str)}
        live = self._live_routes()
        for key in set(self._seen) - set(entries):
            route_id = _route_or_none(key)
            if route_id is None:
                continue
            if live is not None and route_id in live and self._board.get(route_id).generation > 0:
                # Removed (or the whole ConfigMap deleted) by hand while the route has its
                # breaker here: our state goes back.
                self._pending.setdefault(key, encode(self._board.get(route_id)))
            else:
                self._board.unshare(route_id)  # pruned: the breaker is gone
        for key, text in entries.items():
            if self._seen.get(key) == text:
                continue
            route_id = _route_or_none(key)
            try:
                state = decode(text)
                if route_id is None:
                    raise ValueError("the key is not <namespace>.<name>")
            except ValueError as exc:
                log.warning("breaker_board_entry_skipped", configmap=f"{self.namespace}/{self.name}", key=key, reason=str(exc)[:200])
                if route_id is not None and self._board.get(route_id).generation > 0:
                    self._pending.setdefault(key, encode(self._board.get(route_id)))  # repair it with ours
                continue
            if self._board.adopt(route_id, state):
                ADOPTED.inc()
                log.info("breaker_adopted", route=route_id, phase=state.phase.value, generation=state.generation, actor=state.actor.value)
            mine = self._board.get(route_id)
            if newer(mine, state):
                self._pending.setdefault(key, encode(mine))  # ours is later: it must win everywhere
        self._seen = entries
        self.synced.set()
        if self._pending:
            self._wake.set()

    def status(self) -> dict[str, Any]:
        return {
            "configmap": f"{self.namespace}/{self.name}",
            "synced": self.synced.is_set(),
            "entries": len(self._seen),
            "pending": len(self._pending),
            "write_errors": self.errors,
        }
