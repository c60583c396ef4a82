"""``everyAddress``: one name for every control-plane replica (a headless Service). Two
real HTTP servers on 127.0.0.1 and 127.0.0.2 (the same port; all of 127.0.0.0/8 is
loopback), a resolver standing in for the cluster's DNS: each flush reaches every
address the name has, a replica that leaves the name stops getting them, and a name
without addresses drops the flush's calls as ``unresolved``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from telemetry import metrics
from telemetry.breaker_flush import TallyFlusher, _with_host
from telemetry.breaker_tallies import BreakerTallies
from tests.harness.ports import free_port

ADDRESSES = ("127.0.0.1", "127.0.0.2")


class Replicas:
    def __init__(self, port: int) -> None:
        self.port = port
        self.posts: dict[str, int] = {address: 0 for address in ADDRESSES}
        self.names: list[str] = list(ADDRESSES)
        self.asked: list[tuple[str, int]] = []

    async def resolve(self, host: str, port: int) -> list[str]:
        self.asked.append((host, port))
        return list(self.names)


@pytest.fixture
async def replicas() -> AsyncIterator[Replicas]:
    port = free_port()
    found = Replicas(port)
    runners = []
    for address in ADDRESSES:
        async def tallies(request: web.Request, address: str = address) -> web.Response:
            assert request.headers["authorization"] == "Bearer s3cret-credential-x"
            assert request.headers["host"] == f"gatehouse-control-plane-replicas.gatehouse.svc:{port}", "the name, not the address"
            found.posts[address] += 1
            return web.json_response({"accepted": 0})

        app = web.Application()
        app.router.add_post("/breakers/tallies", tallies)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, address, port).start()
        runners.append(runner)
    yield found
    for runner in runners:
        await runner.cleanup()


def flusher(replicas: Replicas) -> TallyFlusher:
    return TallyFlusher(
        BreakerTallies(), urls=[f"http://gatehouse-control-plane-replicas.gatehouse.svc:{replicas.port}"],
        credential="s3cret-credential-x", interval=0.2, timeout=1.0, every_address=True, resolver=replicas.resolve,
    )


async def test_every_address_of_the_name_gets_each_flush_and_a_replica_that_left_does_not(
    replicas: Replicas, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("telemetry.breaker_flush.RESOLVE_EVERY", 0.5)
    flush = flusher(replicas)
    async with flush.session():
        for _ in range(3):
            await flush.flush()
        assert replicas.posts == {"127.0.0.1": 3, "127.0.0.2": 3}
        assert replicas.asked == [("gatehouse-control-plane-replicas.gatehouse.svc", replicas.port)], "resolved once per period"
        replicas.names = ["127.0.0.2"]  # the first replica went away
        await asyncio.sleep(0.6)
        await flush.flush()
        assert replicas.posts == {"127.0.0.1": 3, "127.0.0.2": 4}
        assert len(replicas.asked) == 2


async def test_a_name_without_addresses_drops_the_calls_as_unresolved_and_is_asked_again_a_second_later(
    replicas: Replicas, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("telemetry.breaker_flush.UNRESOLVED_RETRY", 0.3)
    replicas.names = []
    flush = flusher(replicas)
    before = metrics.BREAKER_FLUSHES.labels("unresolved")._value.get()
    async with flush.session():
        await flush.flush()
        await flush.flush()
        assert metrics.BREAKER_FLUSHES.labels("unresolved")._value.get() == before + 2
        assert len(replicas.asked) == 1, "not asked again at every flush"
        replicas.names = ["127.0.0.1"]
        await asyncio.sleep(0.35)
        await flush.flush()
    assert replicas.posts == {"127.0.0.1": 1, "127.0.0.2": 0}


def test_an_address_takes_the_hosts_place_in_the_url() -> None:
    url = "http://replicas.gatehouse.svc:19000/breakers/tallies"
    assert _with_host(url, "10.1.2.3") == "http://10.1.2.3:19000/breakers/tallies"
    assert _with_host(url, "fd00::7") == "http://[fd00::7]:19000/breakers/tallies"
    assert _with_host(url, "fe80::1%eth0") == "http://[fe80::1%25eth0]:19000/breakers/tallies"
