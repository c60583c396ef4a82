"""What the xDS servers need from a cache, kept apart from any implementation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from control_plane.cache.snapshot import Snapshot

Listener = Callable[[], None]


class ConfigWatcher(Protocol):
    def current(self, group: str) -> Snapshot | None:
        """The snapshot for a node group (``node.cluster``), or None before the first sync."""

    def subscribe(self, group: str, on_change: Listener) -> Callable[[], None]:
        """Call ``on_change`` after each new snapshot for ``group``; returns an unsubscribe."""
