"""What the Envoys of every control-plane replica said about the Kubernetes Routes, shared
through one ConfigMap, so that the Lease holder (the one replica that writes Route status)
reports ``Programmed`` for the Envoys connected to any replica, not only its own.

Each replica owns one key of the ConfigMap, its identity, holding

    {"at": <unix seconds>, "routes": {"<namespace>/<name>": ["<resourceVersion>", "<NACK message, or empty>"]}}

its Envoys' last word on each Route they were sent: an ACK (empty) or Envoy's NACK message,
for the object's resourceVersion that served. A replica writes its key as soon as its word
changes (the changes of ``WRITE_DELAY`` together: every Envoy ACKs the same push) and every
``HEARTBEAT`` regardless; the Lease holder removes the keys of replicas not heard from for
``STALE_AFTER`` (pods gone; a live replica whose key goes writes it again).

Every replica watches the ConfigMap (the source runs the watch and feeds ``apply``); for a
route it serves, its status is: rejected by any Envoy at the serving resourceVersion →
``Programmed=False``, else ACKed by any → ``True`` (``KubernetesSource._refresh``).

Failure policy: the API server away → status goes on from this replica's own Envoys; the
write is retried with back-off (up to ``BACKOFF_MAX``) and the peers' words arrive when the
watch resumes. A malformed key is skipped, with a log line naming it and the reason.

Size: about 40 bytes per route and replica; a ConfigMap holds at most 1 MiB (some 12,000
routes with two replicas).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from typing import Any

import structlog
from kubernetes.client import CoreV1Api
from prometheus_client import Counter

from control_plane.sources.kubernetes.shared_config_map import write_keys
from control_plane.sources.kubernetes.watch import Changes

log = structlog.get_logger(component="route_acks")

Word = tuple[str, str]
"""(the Route object's resourceVersion, "" for an ACK or Envoy's NACK message)."""

HEARTBEAT = 60.0
STALE_AFTER = 300.0
WRITE_DELAY = 0.05
BACKOFF_MAX = 10.0
MAX_MESSAGE = 300
"""A NACK message is cut to this many characters (Envoy's can be long; the condition's is)."""

WRITES = Counter(
    "gatehouse_route_acks_writes_total", "Writes of this replica's Envoys' route ACKs to the shared ConfigMap, by outcome", ["outcome"]
)


def config_map_key(identity: str) -> str:
    """A ConfigMap key (``[-._a-zA-Z0-9]+``, at most 253) for a replica's identity."""
    return re.sub(r"[^-._a-zA-Z0-9]", "-", identity)[:253] or "replica"


def encode(at: float, routes: dict[str, Word]) -> str:
    return json.dumps({"at": round(at, 3), "routes": {k: list(v) for k, v in sorted(routes.items())}}, separators=(",", ":"))


def decode(text: str) -> tuple[float, dict[str, Word]]:
    """ValueError naming the field when a key is not what ``encode`` writes."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    at, routes = data.get("at"), data.get("routes")
    if not isinstance(at, int | float) or isinstance(at, bool):
        raise ValueError("at: must be a number")
    if not isinstance(routes, dict):
        raise ValueError("routes: must be an object")
    words: dict[str, Word] = {}
    for key, word in routes.items():
        if not (isinstance(word, list) and len(word) == 2 and all(isinstance(part, str) for part in word)):
            raise ValueError(f"routes.{key}: must be [resourceVersion, message]")
        words[key] = (word[0], word[1])
    return float(at), words


class SharedRouteAcks:
    """This replica's side of the ConfigMap ``namespace/name``: ``say`` what its Envoys
    said, ``heard`` what the other replicas' Envoys said; ``on_change`` gets the routes
    whose peers' words changed. ``may_prune``: whether this replica holds the Lease."""

    def __init__(
        self,
        core: CoreV1Api,
        *,
        namespace: str,
        name: str,
        identity: str,
        may_prune: Callable[[], bool],
        on_change: Callable[[set[str]], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._core = core
        self.namespace, self.name = namespace, name
        self._key = config_map_key(identity)
        self._may_prune = may_prune
        self._on_change = on_change
        self._clock = clock
        self._mine: dict[str, Word] = {}
        self._written: dict[str, Word] | None = None
        """What our key holds (None: not written yet, or removed)."""
        self._last_write = 0.0
        self._peers: dict[str, tuple[float, dict[str, Word]]] = {}
        self._seen: dict[str, str] = {}
        self._wake = asyncio.Event()
        self.synced = asyncio.Event()
        self.errors = 0

    # -- this replica's Envoys -> ConfigMap --------------------------------------------

    def say(self, route: str, word: Word | None) -> None:
        """Its Envoys' latest word on ``route`` (namespace/name); None: no longer served."""
        if word is None:
            if self._mine.pop(route, None) is None:
                return
        else:
            word = (word[0], word[1][:MAX_MESSAGE])
            if self._mine.get(route) == word:
                return
            self._mine[route] = word
        self._wake.set()

    async def run(self) -> None:
        """Write this replica's key (and the Lease holder's removals) until cancelled."""
        backoff = 0.5
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), HEARTBEAT)
            except TimeoutError:
                pass
            self._wake.clear()
            await asyncio.sleep(WRITE_DELAY)
            mine = dict(self._mine)
            batch = self._batch(mine)
            if not batch:
                continue
            try:
                await asyncio.to_thread(
                    write_keys, self._core, self.namespace, self.name, batch, labels={"gatehouse.io/route-acks": "true"},
                    about="what each control-plane replica's Envoys ACKed or NACKed of the Routes, for their status; written by the replicas",
                )
            except Exception as exc:  # noqa: BLE001 - API server away: status goes on locally, try again
                self.errors += 1
                WRITES.labels("failed").inc()
                log.warning("route_acks_write_failed", configmap=f"{self.namespace}/{self.name}", error=str(exc)[:300], retry_in=backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
                self._wake.set()
                continue
            backoff = 0.5
            WRITES.labels("ok").inc()
            if self._key in batch:
                self._written, self._last_write = mine, self._clock()

    def _batch(self, mine: dict[str, Word]) -> dict[str, str | None]:
        now = self._clock()
        batch: dict[str, str | None] = {}
        if mine != self._written or now - self._last_write >= HEARTBEAT * 0.9:
            batch[self._key] = encode(now, mine)
        if self._may_prune():
            batch.update({key: None for key, (at, _) in self._peers.items() if now - at > STALE_AFTER})
        return batch

    # -- ConfigMap -> the peers' words ---------------------------------------------------

    def apply(self, changes: Changes) -> None:
        """The watch's batch (on the loop): the ConfigMap as it is now, or None if deleted."""
        obj = changes.get(f"{self.namespace}/{self.name}")
        data: dict[str, Any] = (obj or {}).get("data") or {}
        entries = {k: v for k, v in data.items() if isinstance(v, str) and k != self._key}
        changed: set[str] = set()
        for key in set(self._peers) - set(entries):
            changed |= set(self._peers.pop(key)[1])
        for key, text in entries.items():
            if self._seen.get(key) == text:
                continue
            before = self._peers.pop(key, (0.0, {}))[1]
            try:
                at, routes = decode(text)
            except ValueError as exc:
                log.warning("route_acks_entry_skipped", configmap=f"{self.namespace}/{self.name}", key=key, reason=str(exc)[:200])
                changed |= set(before)
                continue
            changed |= {route for route in before.keys() | routes.keys() if before.get(route) != routes.get(route)}
            self._peers[key] = (at, routes)
        self._seen = entries
        if self._written is not None and self._key not in data:
            self._written = None  # removed (by hand, or pruned while we could not write): write it again
            self._wake.set()
        self.synced.set()
        if changed:
            self._on_change(changed)

    def heard(self, route: str, revision: str) -> Word | None:
        """The other replicas' Envoys on ``route`` at ``revision``: ``(revision, message)``
        if any rejected it, ``(revision, "")`` if any ACKed it (and none rejected), else None."""
        acked = None
        for _, routes in self._peers.values():
            word = routes.get(route)
            if word is None or word[0] != revision:
                continue
            if word[1]:
                return word
            acked = word
        return acked

    def status(self) -> dict[str, Any]:
        return {
            "configmap": f"{self.namespace}/{self.name}",
            "synced": self.synced.is_set(),
            "peers": len(self._peers),
            "routes": len(self._mine),
            "write_errors": self.errors,
        }
