"""The shared route ACKs' logic with an in-memory stand-in for the ConfigMap API (the real
API server, two replicas and a real Envoy: tests/e2e/test_route_status_replicas.py): what a
replica says reaches its peers, a rejection outweighs an ACK, stale replicas are removed by
the Lease holder only, a removed key is written again, malformed keys are skipped, and the
source's Programmed condition follows the peers."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from control_plane.cache.snapshot import Snapshot
from control_plane.cache.types import ResourceType
from control_plane.model.route import Origin, Route
from control_plane.sources.kubernetes import route_acks
from control_plane.sources.kubernetes.route_acks import SharedRouteAcks, config_map_key, decode, encode
from control_plane.sources.kubernetes.routes import ObjectState
from control_plane.sources.kubernetes.source import PROGRAMMED, KubernetesSettings, KubernetesSource
from control_plane.sources.kubernetes.status import Condition, DesiredStatus

NAMESPACE, NAME = "gatehouse", "gatehouse-route-acks"


class FakeConfigMaps:
    """The two calls the writer makes, on one in-memory ConfigMap."""

    def __init__(self) -> None:
        self.data: dict[str, str] | None = None
        self.fail_next = 0

    def patch_namespaced_config_map(self, name: str, namespace: str, body: dict[str, Any], **kwargs: Any) -> None:
        assert (name, namespace, kwargs["_content_type"]) == (NAME, NAMESPACE, "application/merge-patch+json")
        if self.fail_next:
            self.fail_next -= 1
            raise ApiException(status=503, reason="unavailable")
        if self.data is None:
            raise ApiException(status=404, reason="Not Found")
        for key, value in body["data"].items():
            if value is None:
                self.data.pop(key, None)
            else:
                self.data[key] = value

    def create_namespaced_config_map(self, namespace: str, body: Any, **kwargs: Any) -> None:
        assert body.metadata.labels["gatehouse.io/route-acks"] == "true"
        self.data = dict(body.data)

    def changes(self) -> dict[str, Any]:
        return {f"{NAMESPACE}/{NAME}": {"data": dict(self.data or {})}}


class Replica:
    def __init__(self, api: FakeConfigMaps, identity: str, *, leading: bool = False) -> None:
        self.leading = leading
        self.now = 1000.0
        self.changed: list[set[str]] = []
        self.shared = SharedRouteAcks(
            api, namespace=NAMESPACE, name=NAME, identity=identity,  # type: ignore[arg-type]
            may_prune=lambda: self.leading, on_change=self.changed.append, clock=lambda: self.now,
        )


async def settle(*replicas: Replica, api: FakeConfigMaps) -> None:
    """Let each writer run once, then deliver the ConfigMap to every replica (the watch)."""
    for _ in range(3):
        await asyncio.sleep(route_acks.WRITE_DELAY * 2)
    for replica in replicas:
        replica.shared.apply(api.changes())


@pytest.fixture
def api() -> FakeConfigMaps:
    return FakeConfigMaps()


async def test_a_peers_ack_is_heard_and_a_rejection_outweighs_it(api: FakeConfigMaps) -> None:
    a, b, c = Replica(api, "a"), Replica(api, "b"), Replica(api, "c", leading=True)
    tasks = [asyncio.create_task(r.shared.run()) for r in (a, b, c)]
    try:
        a.shared.say("shop/orders", ("41", ""))
        await settle(a, b, c, api=api)
        assert c.shared.heard("shop/orders", "41") == ("41", "")
        assert c.shared.heard("shop/orders", "40") is None, "another version of the object"
        assert a.shared.heard("shop/orders", "41") is None, "a replica's own word is its local record"
        assert {"shop/orders"} in c.changed
        b.shared.say("shop/orders", ("41", "x" * 1000))
        await settle(a, b, c, api=api)
        assert c.shared.heard("shop/orders", "41") == ("41", "x" * route_acks.MAX_MESSAGE)
        a.shared.say("shop/orders", None)  # no longer served there
        b.shared.say("shop/orders", None)
        await settle(a, b, c, api=api)
        assert c.shared.heard("shop/orders", "41") is None
        assert api.data is not None and json.loads(api.data["a"])["routes"] == {}
    finally:
        for task in tasks:
            task.cancel()


async def test_the_lease_holder_alone_removes_replicas_not_heard_from(api: FakeConfigMaps) -> None:
    api.data = {"gone-pod": encode(0.0, {"shop/orders": ("7", "")})}
    follower, holder = Replica(api, "f"), Replica(api, "h", leading=True)
    for replica in (follower, holder):
        replica.shared.apply(api.changes())
    assert holder.shared.heard("shop/orders", "7") == ("7", "")
    follower.now = holder.now = route_acks.STALE_AFTER + 1
    tasks = [asyncio.create_task(r.shared.run()) for r in (follower, holder)]
    try:
        follower.shared.say("shop/a", ("1", ""))
        await settle(follower, holder, api=api)
        assert api.data is not None and "gone-pod" in api.data, "a follower never removes"
        holder.shared.say("shop/b", ("2", ""))
        await settle(follower, holder, api=api)
        assert set(api.data) == {"f", "h"}
        assert holder.shared.heard("shop/orders", "7") is None
    finally:
        for task in tasks:
            task.cancel()


async def test_a_removed_key_is_written_again_and_writes_survive_an_outage(api: FakeConfigMaps) -> None:
    replica = Replica(api, "pod-1")
    task = asyncio.create_task(replica.shared.run())
    try:
        api.data = {}
        api.fail_next = 1  # the first write fails: retried after the back-off
        replica.shared.say("shop/orders", ("5", ""))
        for _ in range(40):
            await asyncio.sleep(0.05)
            if api.data and "pod-1" in api.data:
                break
        assert api.data is not None and decode(api.data["pod-1"])[1] == {"shop/orders": ("5", "")}
        assert replica.shared.errors == 1
        api.data.pop("pod-1")  # by hand
        replica.shared.apply(api.changes())
        await settle(replica, api=api)
        assert "pod-1" in api.data
    finally:
        task.cancel()


def test_malformed_keys_are_skipped_and_the_rest_heard() -> None:
    replica = Replica(FakeConfigMaps(), "me")
    data = {
        "bad-json": "{",
        "bad-at": json.dumps({"at": True, "routes": {}}),
        "bad-word": json.dumps({"at": 1, "routes": {"shop/a": ["1"]}}),
        "good": encode(1.0, {"shop/a": ("1", "")}),
    }
    replica.shared.apply({f"{NAMESPACE}/{NAME}": {"data": data}})
    assert replica.shared.heard("shop/a", "1") == ("1", "")
    assert replica.shared.status()["peers"] == 1


def test_identities_become_config_map_keys() -> None:
    assert config_map_key("gatehouse-control-plane-7d9f-x2k4c-1a2b3c") == "gatehouse-control-plane-7d9f-x2k4c-1a2b3c"
    assert config_map_key("host name/with:odd*chars") == "host-name-with-odd-chars"


def _text(rng: random.Random, most: int) -> str:
    return "".join(rng.choice('ab/-.:"\\{}[] \u00e9\u2603') for _ in range(rng.randint(0, most)))


def _value(rng: random.Random, depth: int = 0) -> object:
    scalars = [None, rng.random() < 0.5, rng.randint(-5, 5), rng.random() * 1e9, _text(rng, 6)]
    kind = rng.randrange(len(scalars) + (2 if depth < 3 else 0))
    if kind < len(scalars):
        return scalars[kind]
    if kind == len(scalars):
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {_text(rng, 4): _value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


@pytest.mark.parametrize("seed", range(200))
def test_decode_reads_what_encode_writes_and_refuses_anything_else_with_a_value_error(seed: int) -> None:
    """Property (seeded): any words round-trip; any other JSON is a ValueError (a key
    edited by hand is skipped with its reason, never a crash of the watch)."""
    rng = random.Random(seed)
    routes = {_text(rng, 20) or "k": (_text(rng, 8), _text(rng, 30)) for _ in range(rng.randint(0, 6))}
    at = rng.random() * 4e9
    decoded_at, decoded = decode(encode(at, routes))
    assert decoded == routes and abs(decoded_at - at) < 0.001
    # Anything, or the right outline with anything inside.
    other = _value(rng) if rng.random() < 0.5 else {"at": _value(rng), "routes": {_text(rng, 8): _value(rng) for _ in range(2)}}
    try:
        decode(json.dumps(other))
    except ValueError:
        pass


def _route(key: str, revision: str) -> Route:
    namespace, name = key.split("/")
    return Route(namespace, name, None, Origin("kubernetes", key, revision))  # type: ignore[arg-type]


def test_the_source_takes_programmed_from_a_peer_and_a_peers_rejection(monkeypatch: pytest.MonkeyPatch) -> None:
    """The status a replica would write: its own Envoys said nothing, a peer's did."""
    source = KubernetesSource(KubernetesSettings(kubeconfig="unused", route_acks=NAME, lease_namespace=NAMESPACE))
    written: dict[str, DesiredStatus] = {}

    class Writer:
        def set(self, key: str, desired: DesiredStatus) -> None:
            written[key] = desired

    state = ObjectState("shop/orders", 3, True, "Accepted", "", _route("shop/orders", "41"))
    monkeypatch.setattr(source, "_writer", Writer())
    monkeypatch.setattr(source.routes, "state", lambda key: state if key == state.key else None)
    shared = source.route_acks = SharedRouteAcks(
        FakeConfigMaps(), namespace=NAMESPACE, name=NAME, identity="me",  # type: ignore[arg-type]
        may_prune=lambda: False, on_change=source._refresh_all,
    )

    def programmed() -> Condition:
        return written["shop/orders"].conditions[1]

    def peers(**data: str) -> None:
        shared.apply({f"{NAMESPACE}/{NAME}": {"data": data}})

    source._refresh("shop/orders")
    assert programmed().status == "Unknown"
    peers(peer=encode(1.0, {"shop/orders": ("41", "")}))
    assert programmed() == PROGRAMMED
    peers(peer=encode(1.0, {"shop/orders": ("41", "")}), other=encode(1.0, {"shop/orders": ("41", "regex too big")}))
    assert (programmed().status, programmed().reason, programmed().message) == ("False", "Rejected", "Envoy rejected it: regex too big")
    peers(peer=encode(1.0, {"shop/orders": ("40", "")}))
    assert programmed().status == "Unknown", "a word on another version of the object does not count"
    # Its own Envoys ACKed it, another replica's refused it: the rejection shows.
    assert state.serving is not None
    source.acked(ResourceType.ROUTE, Snapshot.build(clusters=(), endpoints=(), listeners=(), routes=(), model=(state.serving,)))
    assert programmed() == PROGRAMMED
    peers(other=encode(1.0, {"shop/orders": ("41", "regex too big")}))
    assert (programmed().status, programmed().reason) == ("False", "Rejected")
