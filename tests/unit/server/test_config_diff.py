"""node_diff: what a proxy lacks, still has, or runs at another version, per subscribed type."""

from __future__ import annotations

from control_plane.cache.resource import Resource
from control_plane.cache.snapshot import Snapshot
from control_plane.cache.types import ResourceType
from control_plane.config_diff import UNKNOWN, node_diff
from control_plane.proxy_status import Proxy
from control_plane.translator.messages import Cluster


def cluster(name: str, timeout: str = "3s") -> Resource:
    message = Cluster(name=name)
    message.connect_timeout.FromJsonString(timeout)
    return Resource.from_message(ResourceType.CLUSTER, name, message)


def test_added_removed_and_changed_with_a_unified_diff() -> None:
    proxy = Proxy(1, "envoy-1", "gateway", "sotw", subscribed={"CDS"})
    proxy.resources["CDS"] = {"a": cluster("a"), "gone": cluster("gone")}
    latest = Snapshot.build(clusters=[cluster("a", "5s"), cluster("new")], endpoints=[], listeners=[], routes=[])
    diff = node_diff(proxy, latest)
    assert set(diff) == {"CDS"}
    assert diff["CDS"]["added"] == ["new"] and diff["CDS"]["removed"] == ["gone"]
    text = diff["CDS"]["changed"]["a"]
    assert "-connect_timeout: 3s" in text and "+connect_timeout: 5s" in text


def test_in_sync_is_empty_and_unsubscribed_types_are_ignored() -> None:
    proxy = Proxy(1, "envoy-1", "gateway", "sotw", subscribed={"CDS"})
    proxy.resources["CDS"] = {"a": cluster("a")}
    latest = Snapshot.build(clusters=[cluster("a")], endpoints=[], listeners=[], routes=[])
    assert node_diff(proxy, latest) == {}


def test_a_resource_resumed_by_version_only_is_reported_as_unknown_content() -> None:
    proxy = Proxy(1, "envoy-1", "gateway", "delta", subscribed={"CDS"})
    proxy.resources["CDS"] = {"a": Resource(ResourceType.CLUSTER, "a", b"", "old-version")}
    latest = Snapshot.build(clusters=[cluster("a")], endpoints=[], listeners=[], routes=[])
    assert node_diff(proxy, latest)["CDS"]["changed"] == {"a": UNKNOWN}
