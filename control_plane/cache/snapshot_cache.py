"""Snapshots per node group, with change notification.

Groups without a snapshot of their own get the default one; a notification is only a
nudge ("look again"), so a slow stream never holds up the cache or other streams.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from control_plane.cache.snapshot import Snapshot
from control_plane.cache.watcher import Listener

DEFAULT_GROUP = "*"


class SnapshotCache:
    def __init__(self) -> None:
        self._snapshots: dict[str, Snapshot] = {}
        self._listeners: dict[str, set[Listener]] = defaultdict(set)

    def current(self, group: str) -> Snapshot | None:
        return self._snapshots.get(group) or self._snapshots.get(DEFAULT_GROUP)

    def set_snapshot(self, snapshot: Snapshot, group: str = DEFAULT_GROUP) -> None:
        previous = self._snapshots.get(group)
        self._snapshots[group] = snapshot
        if previous is not None and previous.version == snapshot.version:
            return
        targets = self._all_listeners() if group == DEFAULT_GROUP else self._listeners.get(group, set())
        for listener in list(targets):
            listener()

    def subscribe(self, group: str, on_change: Listener) -> Callable[[], None]:
        self._listeners[group].add(on_change)

        def unsubscribe() -> None:
            self._listeners[group].discard(on_change)

        return unsubscribe

    def groups(self) -> list[str]:
        return sorted(self._snapshots)

    def _all_listeners(self) -> set[Listener]:
        return {listener for group in self._listeners.values() for listener in group}
