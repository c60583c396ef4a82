"""ResourceWatch against a real API server: list, watch, resume, and relist on 410 Gone."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from control_plane.sources.kubernetes.api import api_client
from control_plane.sources.kubernetes.watch import Changes, ResourceWatch
from tests.harness.kubernetes import KubeAPIServer


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPIServer]:
    server = KubeAPIServer.start(tmp_path_factory.mktemp("kube-watch"))
    try:
        yield server
    finally:
        server.stop()


def service_yaml(name: str) -> str:
    return f"apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: default}}\nspec: {{ports: [{{port: 80}}]}}\n"


async def _collect(watch_changes: list[Changes], predicate: object, timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():  # type: ignore[operator]
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out; changes so far: {watch_changes}")
        await asyncio.sleep(0.05)


@pytest.fixture(scope="module")
def compacting_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPIServer]:
    """Watches served straight from etcd, compacted every second: old versions really go."""
    server = KubeAPIServer.start(
        tmp_path_factory.mktemp("kube-compact"),
        extra_apiserver_args=["--watch-cache=false", "--etcd-compaction-interval=1s"],
    )
    try:
        yield server
    finally:
        server.stop()


async def test_a_compacted_version_relists_and_reports_what_vanished_while_away(compacting_api: KubeAPIServer) -> None:
    api = compacting_api
    loop = asyncio.get_running_loop()
    for name in ("vanished", "stays"):
        api.kubectl("apply", "-f", "-", input=service_yaml(name))
    first: list[Changes] = []
    before = ResourceWatch(api_client(str(api.kubeconfig)), "/api/v1/services", first.append, loop, name="services")
    before.start()
    await _collect(first, lambda: before.synced.is_set(), 30)
    before.stop()

    # While nobody watches: one service goes, another comes, and etcd compacts the history.
    api.kubectl("delete", "service", "vanished", "-n", "default")
    api.kubectl("apply", "-f", "-", input=service_yaml("later"))
    await asyncio.sleep(4)

    changes: list[Changes] = []
    resumed = ResourceWatch(api_client(str(api.kubeconfig)), "/api/v1/services", changes.append, loop, name="services")
    resumed._objects = dict(before._objects)
    resumed._version = before._version
    resumed.synced.set()
    resumed.start()
    try:
        await _collect(changes, lambda: resumed.relists >= 1, 30)
        merged: Changes = {}
        for batch in changes:
            merged.update(batch)
        assert merged.get("default/vanished", "missing") is None, f"the deletion must come through the relist: {list(merged)}"
        assert merged.get("default/later") is not None
        assert "default/stays" not in merged or merged["default/stays"] is not None
    finally:
        resumed.stop()


async def test_watches_survive_an_api_server_restart_without_losing_objects(api: KubeAPIServer) -> None:
    changes: list[Changes] = []
    watch = ResourceWatch(api_client(str(api.kubeconfig)), "/api/v1/services", changes.append, asyncio.get_running_loop(), name="services")
    watch.start()
    try:
        await _collect(changes, lambda: watch.synced.is_set(), 30)
        api.kill_apiserver()
        await asyncio.sleep(2)
        assert not any(v is None for c in changes for v in c.values()), "an unreachable API server must not delete anything"
        api.start_apiserver()
        api.kubectl("apply", "-f", "-", input=service_yaml("after-restart"))
        await _collect(changes, lambda: any("default/after-restart" in c for c in changes), 60)
        assert watch.errors >= 1
    finally:
        watch.stop()
