"""Snapshot values, per-group snapshot cache, and xDS type metadata."""

from control_plane.cache.resource import Resource, content_hash
from control_plane.cache.snapshot import Snapshot, set_version
from control_plane.cache.snapshot_cache import DEFAULT_GROUP, SnapshotCache
from control_plane.cache.types import ResourceType
from control_plane.cache.watcher import ConfigWatcher

__all__ = [
    "DEFAULT_GROUP",
    "ConfigWatcher",
    "Resource",
    "ResourceType",
    "Snapshot",
    "SnapshotCache",
    "content_hash",
    "set_version",
]
