"""node_diff: what a proxy lacks, still has, or runs at another version, per subscribed type."""

from __future__ import annotations

from control_plane.cache.resource import Resource
from control_plane.cache.snapshot import Snapshot
from control_plane.cache.types import ResourceType
from control_plane.config_diff import MAX_LINES, UNKNOWN, node_diff
from control_plane.proxy_status import Proxy
from control_plane.translator.messages import Cluster, RouteConfiguration


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


def route_config(*entries: tuple[str, str, str]) -> Resource:
    """(route name, prefix, commit) entries in one virtual host "any"."""
    config = RouteConfiguration(name="gatehouse_http")
    vhost = config.virtual_hosts.add(name="any", domains=["*"])
    for name, prefix, commit in entries:
        entry = vhost.routes.add(name=name)
        entry.match.prefix = prefix
        entry.direct_response.status = 200
        entry.metadata.filter_metadata["gatehouse"].update({"origin": f"git:r.yaml@{commit}"})
    return Resource.from_message(ResourceType.ROUTE, "gatehouse_http", config)


def test_a_route_table_is_diffed_entry_by_entry_without_the_commit_metadata() -> None:
    proxy = Proxy(1, "envoy-1", "gateway", "sotw", subscribed={"RDS"})
    proxy.resources["RDS"] = {"gatehouse_http": route_config(("a", "/a", "c1"), ("b", "/b", "c1"), ("gone", "/g", "c1"))}
    latest = Snapshot.build(
        clusters=[], endpoints=[], listeners=[],
        routes=[route_config(("a", "/a", "c2"), ("b", "/b2", "c2"), ("new", "/n", "c2"))],
    )
    text = node_diff(proxy, latest)["RDS"]["changed"]["gatehouse_http"]
    assert "+ new #0 in virtual host any" in text and "- gone #0 in virtual host any" in text
    assert "-  prefix: /b\n" in text and "+  prefix: /b2" in text
    assert " a #0" not in text and "c1" not in text and "c2" not in text, "unchanged entries and commit metadata stay out"


def test_a_huge_diff_is_capped() -> None:
    proxy = Proxy(1, "envoy-1", "gateway", "sotw", subscribed={"RDS"})
    proxy.resources["RDS"] = {"gatehouse_http": route_config()}
    latest = Snapshot.build(
        clusters=[], endpoints=[], listeners=[], routes=[route_config(*((f"r{i}", f"/r{i}", "c") for i in range(500)))]
    )
    text = node_diff(proxy, latest)["RDS"]["changed"]["gatehouse_http"]
    assert len(text.splitlines()) == MAX_LINES + 1
    assert text.rstrip().endswith("more lines (see GET /config for the whole resource)")
