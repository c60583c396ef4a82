"""The shared breaker board's logic with an in-memory stand-in for the ConfigMap API (the
real API server: tests/e2e/test_breaker_replicas.py): entries in and out, the max
register, pruning by the Lease holder, and writes kept through an API outage."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from control_plane.breakers.board import Actor, BreakerBoard, BreakerState, Phase
from control_plane.sources.kubernetes.breaker_board import SharedBreakerBoard, decode, encode, entry_key, route_of

NAMESPACE, NAME = "gatehouse", "gatehouse-breakers"
ROUTE = "shop/orders"


class FakeConfigMaps:
    """The two calls the board makes, on one in-memory ConfigMap."""

    def __init__(self) -> None:
        self.data: dict[str, str] | None = None
        self.patches: list[dict[str, str | None]] = []
        self.fail_next = 0

    def patch_namespaced_config_map(self, name: str, namespace: str, body: dict[str, Any], **kwargs: Any) -> None:
        assert (name, namespace) == (NAME, NAMESPACE)
        assert kwargs["_content_type"] == "application/merge-patch+json"
        if self.fail_next:
            self.fail_next -= 1
            raise ApiException(status=503, reason="unavailable")
        if self.data is None:
            raise ApiException(status=404, reason="Not Found")
        self.patches.append(dict(body["data"]))
        for key, value in body["data"].items():
            if value is None:
                self.data.pop(key, None)
            else:
                self.data[key] = value

    def create_namespaced_config_map(self, namespace: str, body: Any, **kwargs: Any) -> None:
        self.data = dict(body.data)
        self.patches.append(dict(body.data))


class Replica:
    def __init__(self, api: FakeConfigMaps, *, leading: bool = False, live: set[str] | None = None) -> None:
        self.api = api
        self.board = BreakerBoard()
        self.leading = leading
        self.live = live
        self.now = 0.0
        self.shared = SharedBreakerBoard(
            api, self.board, namespace=NAMESPACE, name=NAME,  # type: ignore[arg-type]
            live_routes=lambda: self.live, may_prune=lambda: self.leading, clock=lambda: self.now,
        )

    def see(self) -> None:
        """What the watch delivers: the ConfigMap as it is now."""
        obj = None if self.api.data is None else {"metadata": {"name": NAME, "namespace": NAMESPACE}, "data": dict(self.api.data)}
        self.shared.apply({f"{NAMESPACE}/{NAME}": obj} if obj is not None else {})


@pytest.fixture
async def running() -> AsyncIterator[Callable[[Replica], None]]:
    tasks: list[asyncio.Task[None]] = []
    yield lambda replica: tasks.append(asyncio.create_task(replica.shared.run()))
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def settle(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def opened(generation: int = 1, since: float = 1_800_000_000.0) -> BreakerState:
    return BreakerState(Phase.OPEN, since, Actor.OPERATOR, "INC-7", generation, open_until=since + 600, pinned=True)


def test_an_entry_is_what_a_move_sets_and_a_bad_one_names_its_field() -> None:
    state = opened()
    assert decode(encode(state)) == state
    assert "probes" not in encode(state), "the probes each replica counts are not shared"
    for text, field in (
        ('{"phase":"ajar","actor":"operator"}', "phase"),
        (json.dumps({**json.loads(encode(state)), "generation": 0}), "generation"),
        (json.dumps({**json.loads(encode(state)), "openUntil": None}), "openUntil"),
        ("[1]", "object"),
    ):
        with pytest.raises(ValueError, match=field):
            decode(text)
    assert (entry_key(ROUTE), route_of("shop.orders.v2")) == ("shop.orders", "shop/orders.v2")
    with pytest.raises(ValueError):
        route_of("no-dot")


async def test_a_move_here_is_written_and_a_peer_adopts_it_without_writing_it_back(running: Callable[[Replica], None]) -> None:
    api = FakeConfigMaps()
    a, b = Replica(api), Replica(api)
    for replica in (a, b):
        replica.see()  # the first list: no ConfigMap yet
        running(replica)
    moved = a.board.move(ROUTE, Phase.OPEN, actor=Actor.OPERATOR, reason="INC-7", open_for=600, pinned=True)
    await settle(lambda: api.data is not None)
    assert api.data == {"shop.orders": encode(moved)}, "created on first use, with the move"
    b.see()
    assert b.board.get(ROUTE) == moved
    a.see()
    await asyncio.sleep(0.05)
    assert len(api.patches) == 1, "an adopted state is not written again"


async def test_two_moves_at_once_end_on_the_later_one_everywhere(running: Callable[[Replica], None]) -> None:
    api = FakeConfigMaps()
    api.data = {}
    a, b = Replica(api), Replica(api)
    for replica in (a, b):
        replica.see()
        running(replica)
    # Both move from generation 0 to 1; b's is later, but a's patch lands last.
    b.board.clock = lambda: 2_000.0
    a.board.clock = lambda: 1_000.0
    later = b.board.move(ROUTE, Phase.CLOSED, actor=Actor.OPERATOR, reason="b", pinned=True)
    await settle(lambda: len(api.patches) == 1)
    a.board.move(ROUTE, Phase.OPEN, actor=Actor.OPERATOR, reason="a", open_for=60)
    await settle(lambda: len(api.patches) == 2)
    a.see()
    b.see()  # b sees a's older entry over its own: writes its own again
    await settle(lambda: len(api.patches) == 3)
    a.see()
    assert a.board.get(ROUTE) == later == b.board.get(ROUTE)
    assert api.data == {"shop.orders": encode(later)}


async def test_a_malformed_entry_is_skipped_and_the_others_adopted() -> None:
    api = FakeConfigMaps()
    api.data = {"shop.orders": "{not json", "shop.cart": encode(opened()), "Bad_Key": encode(opened())}
    replica = Replica(api)
    replica.see()
    assert replica.board.get(ROUTE).phase is Phase.CLOSED
    assert replica.board.get("shop/cart") == opened()
    assert replica.shared.synced.is_set()


async def test_only_the_judging_replica_prunes_after_a_minute_without_the_route(running: Callable[[Replica], None]) -> None:
    api = FakeConfigMaps()
    api.data = {"shop.orders": encode(opened()), "shop.gone": encode(opened())}
    follower, leader = Replica(api, live={ROUTE}), Replica(api, leading=True, live=None)
    for replica in (follower, leader):
        replica.see()
        running(replica)

    async def prune_pass(*replicas: Replica) -> None:
        for replica in replicas:
            replica.shared._wake.set()
        await asyncio.sleep(0.05)

    await prune_pass(follower, leader)
    assert api.patches == [], "a follower never prunes; a leader without a snapshot does not either"
    leader.live = {ROUTE}
    await prune_pass(leader)
    leader.now = 59.0
    await prune_pass(leader)
    assert api.patches == [], "gone from the leader's snapshot for less than a minute: another replica may have it"
    leader.now = 60.0
    await prune_pass(leader)
    assert api.patches == [{"shop.gone": None}]
    follower.see()
    assert api.data == {"shop.orders": encode(opened())}
    assert follower.board.get("shop/gone").phase is Phase.CLOSED, "dropped on every replica: it starts CLOSED if it comes back"
    assert follower.board.get(ROUTE) == opened()


async def test_an_entry_removed_or_garbled_by_hand_is_written_again_by_a_replica_that_has_it(running: Callable[[Replica], None]) -> None:
    api = FakeConfigMaps()
    api.data = {}
    replica = Replica(api, live={ROUTE})
    replica.see()
    running(replica)
    moved = replica.board.move(ROUTE, Phase.OPEN, actor=Actor.OPERATOR, reason="INC-7", open_for=600, pinned=True)
    await settle(lambda: api.data == {"shop.orders": encode(moved)})
    replica.see()
    api.data = {}  # kubectl edit: the key removed
    replica.see()
    await settle(lambda: api.data == {"shop.orders": encode(moved)})
    replica.see()
    api.data = {"shop.orders": "{garbled"}
    replica.see()
    await settle(lambda: api.data == {"shop.orders": encode(moved)})
    assert replica.board.get(ROUTE) == moved


async def test_moves_made_while_the_api_server_is_away_are_written_once_it_answers(running: Callable[[Replica], None]) -> None:
    api = FakeConfigMaps()
    api.data = {}
    api.fail_next = 2
    replica = Replica(api)
    replica.see()
    running(replica)
    replica.board.move(ROUTE, Phase.OPEN, actor=Actor.OPERATOR, reason="first", open_for=60)
    await asyncio.sleep(0.1)
    last = replica.board.move(ROUTE, Phase.CLOSED, actor=Actor.OPERATOR, reason="second", pinned=True)
    await settle(lambda: api.data == {"shop.orders": encode(last)}, timeout=10)
    assert replica.shared.errors == 2 and api.patches == [{"shop.orders": encode(last)}], "the newest only"


def test_the_kubernetes_source_is_synced_only_once_the_shared_board_has_been_read() -> None:
    """So a restarted replica's first snapshot already holds the shared phases."""
    from control_plane.sources.kubernetes.source import KubernetesSettings, KubernetesSource

    source = KubernetesSource(KubernetesSettings(kubeconfig="unused", breaker_board=NAME, lease_namespace=NAMESPACE))
    assert source.share_breakers(BreakerBoard(), lambda: None) is True
    for name in ("/apis/gatehouse.io/v1alpha1/routes", "referencegrants", "services", "endpointslices"):
        source._first(name, lambda changes: None)({})
    assert not source.synced.is_set()
    source._first("breaker-board", lambda changes: None)({})
    assert source.synced.is_set()
    unshared = KubernetesSource(KubernetesSettings(kubeconfig="unused"))
    assert unshared.share_breakers(BreakerBoard(), lambda: None) is False, "not configured: nothing to wait for"
