"""The Kubernetes harness starts a real etcd + kube-apiserver and they behave like a cluster's API.

Checks what the control plane's Kubernetes sources and the chart tests rely on: kubectl and
helm work against it, namespaces/Services/EndpointSlices/CRDs/Leases can be created, the
Python `kubernetes` client can read them, and data survives a kube-apiserver restart.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.kubernetes import KubeAPIServer, kube_tools, kube_versions

pytestmark = pytest.mark.timeout(600)

# EndpointSlice validation rejects loopback (127.0.0.0/8, ::1) and link-local addresses, so
# these are RFC 5737 documentation addresses: stored and read back, never connected to.
SERVICE_AND_SLICE = """\
apiVersion: v1
kind: Service
metadata: {name: orders, namespace: harness}
spec:
  ports: [{name: http, port: 8080, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: orders-abc12
  namespace: harness
  labels: {kubernetes.io/service-name: orders}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
  - addresses: ["192.0.2.11"]
    conditions: {ready: true}
  - addresses: ["192.0.2.12"]
    conditions: {ready: false}
"""

WIDGET_CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.harness.gatehouse.io}
spec:
  group: harness.gatehouse.io
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
    - name: v1alpha1
      served: true
      storage: true
      subresources: {status: {}}
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size: {type: integer, minimum: 1}
"""

WIDGET = """\
apiVersion: harness.gatehouse.io/v1alpha1
kind: Widget
metadata: {name: small, namespace: harness}
spec: {size: 3}
"""

LEASE = """\
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: gatehouse-leader, namespace: harness}
spec: {holderIdentity: harness-test, leaseDurationSeconds: 15}
"""


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPIServer]:
    server = KubeAPIServer.start(tmp_path_factory.mktemp("kube"))
    try:
        yield server
    finally:
        server.stop()


def test_kubectl_and_server_versions_match_the_pin(kube: KubeAPIServer) -> None:
    pinned = kube_versions()["KUBERNETES_VERSION"]
    versions = json.loads(kube.kubectl("version", "--output=json").stdout)
    assert versions["clientVersion"]["gitVersion"] == pinned
    assert versions["serverVersion"]["gitVersion"] == pinned
    # The admin token really is an admin (group system:masters under RBAC).
    assert kube.kubectl("auth", "can-i", "*", "*", "--all-namespaces").stdout.strip() == "yes"


def test_default_namespace_and_kubernetes_service_exist(kube: KubeAPIServer) -> None:
    assert kube.get_status("/api/v1/namespaces/default") == 200
    service = json.loads(kube.kubectl("get", "service", "kubernetes", "-n", "default", "-o", "json").stdout)
    assert service["spec"]["clusterIP"] == "10.0.0.1"


def test_namespace_service_endpointslice_crd_lease(kube: KubeAPIServer) -> None:
    from kubernetes import client

    kube.kubectl("create", "namespace", "harness")
    kube.kubectl("apply", "-f", "-", input=SERVICE_AND_SLICE)

    kube.kubectl("apply", "-f", "-", input=WIDGET_CRD)
    kube.wait_established("widgets.harness.gatehouse.io")
    # Discovery of a new CRD can lag behind Established by a moment.
    deadline = time.monotonic() + 30
    while True:
        applied = kube.kubectl("apply", "-f", "-", input=WIDGET, check=False)
        if applied.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert applied.returncode == 0, applied.stderr
    rejected = kube.kubectl(
        "apply", "-f", "-", input=WIDGET.replace("name: small", "name: bad").replace("size: 3", "size: 0"),
        check=False,
    )  # fmt: skip
    assert rejected.returncode != 0 and "spec.size" in rejected.stderr

    kube.kubectl("apply", "-f", "-", input=LEASE)

    with kube.api_client() as api_client:
        slices = client.DiscoveryV1Api(api_client).list_namespaced_endpoint_slice(
            "harness", label_selector="kubernetes.io/service-name=orders"
        )
        assert [s.metadata.name for s in slices.items] == ["orders-abc12"]
        endpoints = {e.addresses[0]: e.conditions.ready for e in slices.items[0].endpoints}
        assert endpoints == {"192.0.2.11": True, "192.0.2.12": False}

        service = client.CoreV1Api(api_client).read_namespaced_service("orders", "harness")
        assert service.spec.ports[0].port == 8080

        widget = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
            "harness.gatehouse.io", "v1alpha1", "harness", "widgets", "small"
        )
        assert widget["spec"] == {"size": 3}

        lease = client.CoordinationV1Api(api_client).read_namespaced_lease("gatehouse-leader", "harness")
        assert lease.spec.holder_identity == "harness-test"


def test_watch_sees_a_new_endpointslice(kube: KubeAPIServer) -> None:
    from kubernetes import client, watch

    kube.kubectl("create", "namespace", "watched")
    with kube.api_client() as api_client:
        discovery = client.DiscoveryV1Api(api_client)
        since = discovery.list_namespaced_endpoint_slice("watched").metadata.resource_version
        kube.kubectl("apply", "-f", "-", input=SERVICE_AND_SLICE.replace("namespace: harness", "namespace: watched"))
        events = [
            (event["type"], event["object"].metadata.name)
            for event in watch.Watch().stream(
                discovery.list_namespaced_endpoint_slice, "watched", resource_version=since, timeout_seconds=3
            )
        ]
    assert events == [("ADDED", "orders-abc12")]


def test_missing_tools_fail_under_ci(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GATEHOUSE_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="run scripts/build-kube-tools"):
        kube_tools()
    monkeypatch.setenv("CI", "")
    with pytest.raises(pytest.skip.Exception, match="kube-apiserver"):
        kube_tools()


def test_data_survives_apiserver_restart(kube: KubeAPIServer) -> None:
    kube.kubectl("create", "namespace", "restart")
    kube.kubectl("create", "configmap", "kept", "-n", "restart", "--from-literal=key=value")
    port, etcd_pid = kube.port, kube.etcd.pid if kube.etcd else None
    old_pid = kube.apiserver.pid if kube.apiserver else None

    kube.kill_apiserver()
    assert not kube.ready()
    kube.start_apiserver()

    assert kube.port == port and kube.apiserver is not None and kube.apiserver.pid != old_pid
    assert kube.etcd is not None and kube.etcd.pid == etcd_pid and kube.etcd.alive()
    data = json.loads(kube.kubectl("get", "configmap", "kept", "-n", "restart", "-o", "json").stdout)
    assert data["data"] == {"key": "value"}

    kube.restart_apiserver()  # graceful this time
    assert kube.kubectl("get", "namespace", "restart", "-o", "name").stdout.strip() == "namespace/restart"


def test_helm_version_matches_the_pin(tmp_path: Path) -> None:
    import subprocess

    tools = kube_tools()
    out = subprocess.run(
        [tools.helm, "version", "--short"],
        capture_output=True, text=True, timeout=60, check=True,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    ).stdout  # fmt: skip
    assert out.startswith(kube_versions()["HELM_VERSION"])


def test_helm_talks_to_the_apiserver(kube: KubeAPIServer) -> None:
    assert kube.helm("list", "--all-namespaces", "--output", "json").stdout.strip() == "[]"
