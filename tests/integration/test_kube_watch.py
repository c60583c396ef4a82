"""ResourceWatch against a real API server: list, watch, resume, and relist on 410 Gone."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from control_plane.sources.kubernetes.api import api_client
from control_plane.sources.kubernetes import watch as watch_module
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


REFERENCE_GRANT_CRD = Path(__file__).resolve().parents[2] / "charts" / "gatehouse" / "crds" / "gateway.networking.k8s.io_referencegrants.yaml"
GRANT_YAML = """\
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: evil-to-orders, namespace: default}
spec:
  from: [{group: gatehouse.io, kind: Route, namespace: evil}]
  to: [{group: "", kind: Service, name: orders}]
"""


async def test_an_optional_resource_absent_is_an_empty_list_and_is_found_once_installed(
    api: KubeAPIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ReferenceGrant CRD may be missing: the watch syncs with nothing (no grant, so no
    cross-namespace backend), picks the CRD up once installed, and drops every grant when
    the CRD goes."""
    monkeypatch.setattr(watch_module, "ABSENT_RETRY", 0.5)
    loop = asyncio.get_running_loop()
    changes: list[Changes] = []
    watch = ResourceWatch(
        api_client(str(api.kubeconfig)), "/apis/gateway.networking.k8s.io/v1beta1/referencegrants", changes.append, loop,
        name="referencegrants", optional=True,
    )  # fmt: skip
    watch.start()
    try:
        await _collect(changes, lambda: watch.synced.is_set() and changes, 30)
        assert changes == [{}] and watch.absent and watch.errors == 0, "404 is an empty list, not an error"

        api.kubectl("apply", "--server-side", "-f", str(REFERENCE_GRANT_CRD))
        api.wait_established("referencegrants.gateway.networking.k8s.io")
        api.kubectl("apply", "-f", "-", input=GRANT_YAML)
        await _collect(changes, lambda: any("default/evil-to-orders" in batch for batch in changes), 30)
        assert not watch.absent
        [stored] = [batch["default/evil-to-orders"] for batch in changes if "default/evil-to-orders" in batch]
        assert stored is not None and stored["spec"]["to"] == [{"group": "", "kind": "Service", "name": "orders"}]

        api.kubectl("delete", "crd", "referencegrants.gateway.networking.k8s.io", "--wait=true")
        # Its objects are deleted with it (a DELETED event, or the absent relist), then the API goes.
        await _collect(changes, lambda: changes[-1].get("default/evil-to-orders", "missing") is None, 60)
        await _collect(changes, lambda: watch.absent, 30)
    finally:
        watch.stop()
