"""Forged EndpointSlices on a real API server never reach Envoy's endpoints.

A tenant who may write EndpointSlices (or Endpoints, mirrored into slices) could point a
Service at another tenant's pod, Redis or the control plane. The real control plane reads
a real kube-apiserver; what it would send Envoy is read from ``GET /config?type=EDS``. The
test API server has no controller-manager, so the test writes the controller's slices
itself, with its ``managed-by`` label, as the controller would.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.control_plane import ControlPlaneProcess
from tests.harness.http_client import wait_for
from tests.harness.kubernetes import KubeAPIServer
from tests.harness.ports import free_port
from tests.harness.route_repo import RouteRepo, route_doc

REPO_ROOT = Path(__file__).resolve().parents[2]
CRD = REPO_ROOT / "charts" / "gatehouse" / "crds" / "routes.gatehouse.io.yaml"
REFERENCE_GRANT_CRD = REPO_ROOT / "charts" / "gatehouse" / "crds" / "gateway.networking.k8s.io_referencegrants.yaml"
MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
CONTROLLER = "endpointslice-controller.k8s.io"
MIRRORING = "endpointslicemirroring-controller.k8s.io"


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPIServer]:
    server = KubeAPIServer.start(tmp_path_factory.mktemp("kube-slices"))
    try:
        server.kubectl("apply", "-f", str(CRD))
        server.kubectl("apply", "--server-side", "-f", str(REFERENCE_GRANT_CRD))
        server.wait_established("routes.gatehouse.io")
        server.wait_established("referencegrants.gateway.networking.k8s.io")
        yield server
    finally:
        server.stop()


def apply(api: KubeAPIServer, *docs: dict[str, Any]) -> None:
    api.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))


def service(name: str, *, selector: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}
    if selector:
        spec["selector"] = {"app": name}
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def endpoint_slice(name: str, service_name: str, manager: str | None, address: str) -> dict[str, Any]:
    labels = {"kubernetes.io/service-name": service_name}
    if manager:
        labels[MANAGED_BY] = manager
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 9000, "protocol": "TCP"}],
        "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
    }


def eds(plane: ControlPlaneProcess) -> dict[str, list[str]]:
    """Each cluster's endpoint addresses as the control plane would send them to Envoy."""
    code, body = plane._request("/config?type=EDS")
    assert code == 200, body
    out: dict[str, list[str]] = {}
    for assignment in json.loads(body).get("EDS", []):
        out[assignment["cluster_name"]] = sorted(
            lb["endpoint"]["address"]["socket_address"]["address"]
            for group in assignment.get("endpoints", [])
            for lb in group.get("lb_endpoints", [])
        )
    return out


def addresses_of(plane: ControlPlaneProcess, service_name: str) -> list[str]:
    found = [addresses for cluster, addresses in eds(plane).items() if service_name in cluster]
    assert len(found) == 1, eds(plane)
    return found[0]


@pytest.fixture
def plane(tmp_path: Path, api: KubeAPIServer, request: pytest.FixtureRequest) -> Iterator[ControlPlaneProcess]:
    trust: dict[str, Any] = getattr(request, "param", {})
    repo = RouteRepo(tmp_path / "repo")
    names = ("orders", "legacy", "forged")
    repo.write(
        "routes.yaml",
        [route_doc(n, {"auth": {"required": False}, "match": {"pathPrefix": f"/{n}"}, "backends": [{"service": n, "port": 8080}]}) for n in names],
    )
    repo.commit("routes to the three Services")
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text("services: {}\n")
    kubernetes = {"kubeconfig": str(api.kubeconfig), "leaseNamespace": "default", "writeStatus": False, **trust}
    process = ControlPlaneProcess.write_config(tmp_path / "cp", repo=repo.root, endpoints=endpoints, listener_port=free_port(), kubernetes=kubernetes)
    process.start()
    try:
        yield process
    finally:
        process.stop()
        slices = ("orders-abc12", "orders-def34", "orders-extra", "legacy-mirrored", "forged-ctl")
        api.kubectl("delete", "endpointslices", "-n", "default", "--ignore-not-found", *slices, check=False)
        api.kubectl("delete", "services", "-n", "default", "--ignore-not-found", *names, check=False)


def test_forged_slices_are_refused_with_a_log_line_and_a_metric_and_the_controllers_are_used(api: KubeAPIServer, plane: ControlPlaneProcess) -> None:
    apply(api, service("orders", selector=True), service("legacy", selector=False), service("forged", selector=False))
    before = plane.metric("gatehouse_endpoints_refused_total", what="slice")
    apply(
        api,
        endpoint_slice("orders-abc12", "orders", CONTROLLER, "10.244.0.10"),  # what the controller writes
        endpoint_slice("orders-extra", "orders", None, "10.96.0.99"),  # no manager: someone's hand
        endpoint_slice("legacy-mirrored", "legacy", MIRRORING, "10.244.7.7"),  # user-written Endpoints, mirrored
        endpoint_slice("forged-ctl", "forged", CONTROLLER, "10.244.9.9"),  # claims the controller, no selector
    )
    wait_for(lambda: addresses_of(plane, "orders") == ["10.244.0.10"], 15, "the controller's slice in EDS")
    wait_for(lambda: plane.metric("gatehouse_endpoints_refused_total", what="slice") >= before + 3, 10, "three refusals counted")
    time.sleep(0.5)  # a late push of a forged slice would show now
    assert addresses_of(plane, "orders") == ["10.244.0.10"]
    assert addresses_of(plane, "legacy") == []
    assert addresses_of(plane, "forged") == []
    log = (plane.log_dir / "control-plane.log").read_text()
    for key, reason in [
        ("default/orders-extra", "no endpointslice.kubernetes.io/managed-by label"),
        ("default/legacy-mirrored", f"{MIRRORING} is not a trusted manager"),
        ("default/forged-ctl", "on a Service without a selector"),
    ]:
        lines = [line for line in log.splitlines() if "endpoint_slice_refused" in line and key in line]
        assert lines and reason in lines[0], f"no refusal logged for {key}: {lines}"
    assert "orders-abc12" not in "".join(line for line in log.splitlines() if "endpoint_slice_refused" in line)


@pytest.mark.parametrize("plane", [{"endpointSlices": {"trustedManagers": [CONTROLLER, MIRRORING], "addressRanges": ["10.244.0.0/16"]}}], indirect=True)
def test_an_operator_may_trust_mirrored_slices_within_the_pod_range(api: KubeAPIServer, plane: ControlPlaneProcess) -> None:
    apply(api, service("orders", selector=True), service("legacy", selector=False))
    apply(
        api,
        endpoint_slice("orders-abc12", "orders", CONTROLLER, "10.244.0.10"),
        endpoint_slice("orders-def34", "orders", CONTROLLER, "10.97.0.1"),  # outside addressRanges
        endpoint_slice("legacy-mirrored", "legacy", MIRRORING, "10.244.7.7"),
    )
    wait_for(lambda: addresses_of(plane, "legacy") == ["10.244.7.7"], 15, "the mirrored slice in EDS")
    wait_for(lambda: addresses_of(plane, "orders") == ["10.244.0.10"], 15, "the controller's slice in EDS")
    wait_for(lambda: plane.metric("gatehouse_endpoints_refused_total", what="address") >= 1, 10, "the refused address counted")
    assert "address 10.97.0.1 is outside addressRanges" in (plane.log_dir / "control-plane.log").read_text()
