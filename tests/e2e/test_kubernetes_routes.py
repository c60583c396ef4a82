"""`kubectl apply` a Route, and Envoy serves it: against a real API server, real Envoy."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.control_plane import ControlPlaneProcess
from tests.harness.envoy import envoy_binary
from tests.harness.gateway import GatewayStack
from tests.harness.http_client import Load, wait_for
from tests.harness.kubernetes import KubeAPIServer, KubectlError
from tests.harness.netns import TestNetwork
from tests.harness.upstream import EchoUpstream

REPO_ROOT = Path(__file__).resolve().parents[2]
CRD = REPO_ROOT / "charts" / "gatehouse" / "crds" / "routes.gatehouse.io.yaml"


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPIServer]:
    envoy_binary()
    server = KubeAPIServer.start(tmp_path_factory.mktemp("kube"))
    try:
        server.kubectl("apply", "-f", str(CRD))
        server.wait_established("routes.gatehouse.io")
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def addresses(test_network: TestNetwork) -> list[str]:
    """Upstream addresses an EndpointSlice may hold (the API server refuses 127.0.0.0/8),
    inside the session's test namespace."""
    return test_network.addresses(2)


@pytest.fixture
def namespace(api: KubeAPIServer) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    api.kubectl("create", "namespace", name)
    return name


def apply(api: KubeAPIServer, *docs: dict[str, Any]) -> None:
    api.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))


def route(name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "gatehouse.io/v1alpha1", "kind": "Route", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def service(name: str, namespace: str, port: int = 8080) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"ports": [{"name": "http", "port": port, "protocol": "TCP"}]},
    }


def endpoint_slice(name: str, namespace: str, service_name: str, upstream: EchoUpstream, **conditions: bool) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": namespace, "labels": {"kubernetes.io/service-name": service_name}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": upstream.port, "protocol": "TCP"}],
        "endpoints": [{"addresses": [upstream.host], "conditions": {"ready": True, **conditions}, "zone": "zone-a"}],
    }


def conditions(api: KubeAPIServer, namespace: str, name: str) -> dict[str, dict[str, Any]]:
    out = api.kubectl("get", "route", name, "-n", namespace, "-o", "json").stdout
    status = json.loads(out).get("status") or {}
    return {c["type"]: c for c in status.get("conditions", [])}


def make_stack(tmp_path: Path, api: KubeAPIServer, namespace: str, addresses: list[str], network: TestNetwork, **kwargs: Any) -> GatewayStack:
    stack = GatewayStack(
        tmp_path / "stack",
        upstreams=(),
        kubernetes={"kubeconfig": str(api.kubeconfig), "namespaces": [namespace], "leaseNamespace": namespace},
        **kwargs,
    )
    stack.repo.commit("no Git routes in this test")
    stack.set_endpoints({})
    for name, host in zip(("svc-a", "svc-b"), addresses):
        stack.upstreams[name] = EchoUpstream.start(name, log_dir=tmp_path / "stack" / "logs", host=host, network=network)
    return stack


def test_apply_a_route_and_envoy_serves_it_then_endpoints_follow_slices(tmp_path: Path, api: KubeAPIServer, namespace: str, addresses: list[str], test_network: TestNetwork) -> None:
    stack = make_stack(tmp_path, api, namespace, addresses, test_network)
    try:
        a, b = stack.upstreams["svc-a"], stack.upstreams["svc-b"]
        apply(api, service("orders", namespace), endpoint_slice("orders-a", namespace, "orders", a))
        stack.start()
        assert stack.get("/orders").status == 404

        started = time.monotonic()
        apply(api, route("orders", namespace, {"match": {"pathPrefix": "/orders"}, "backends": [{"service": "orders", "port": 8080}]}))
        stored = time.monotonic()  # kubectl returned: the API server has the object
        wait_for(lambda: stack.get("/orders").upstream == "svc-a", 10, "Envoy serving the applied Route", interval=0.005)
        latency = time.monotonic() - stored
        print(f"\nRoute stored → Envoy serving: {latency * 1000:.0f} ms (kubectl apply itself: {(stored - started) * 1000:.0f} ms)")
        assert latency < 1.0, f"the stored Route took {latency:.2f}s to reach Envoy"

        wait_for(lambda: conditions(api, namespace, "orders").get("Programmed", {}).get("status") == "True", 10, "Programmed=True")
        accepted = conditions(api, namespace, "orders")["Accepted"]
        assert (accepted["status"], accepted["reason"], accepted["observedGeneration"]) == ("True", "Accepted", 1)
        listing = api.kubectl("get", "gr", "-n", namespace).stdout
        assert "orders" in listing and "True" in listing, listing

        # A second slice for the same Service spreads traffic to the new endpoint.
        apply(api, endpoint_slice("orders-b", namespace, "orders", b))
        wait_for(lambda: {stack.get("/orders").upstream for _ in range(20)} == {"svc-a", "svc-b"}, 10, "traffic on both endpoints")

        # Terminating, then not ready: the endpoint leaves EDS with no failed request.
        with Load(stack.listener_port, ["/orders"], workers=4) as load:
            time.sleep(0.3)
            apply(api, endpoint_slice("orders-b", namespace, "orders", b, serving=True, terminating=True))
            time.sleep(0.5)
            apply(api, endpoint_slice("orders-b", namespace, "orders", b, ready=False))
            time.sleep(0.5)
        assert load.report.total > 100
        assert load.report.non_2xx == 0, load.report.failures[:5]
        assert {stack.get("/orders").upstream for _ in range(20)} == {"svc-a"}

        api.kubectl("delete", "route", "orders", "-n", namespace)
        stack.wait_status("/orders", 404, timeout=10)
    finally:
        stack.stop()


def test_cel_refuses_and_invalid_routes_are_not_accepted_while_others_serve(tmp_path: Path, api: KubeAPIServer, namespace: str, addresses: list[str], test_network: TestNetwork) -> None:
    stack = make_stack(tmp_path, api, namespace, addresses, test_network)
    try:
        apply(api, service("orders", namespace), endpoint_slice("orders-a", namespace, "orders", stack.upstreams["svc-a"]))
        stack.start()
        apply(api, route("good", namespace, {"match": {"pathPrefix": "/good"}, "backends": [{"service": "orders", "port": 8080}]}))
        wait_for(lambda: stack.get("/good").status == 200, 10, "/good served")

        with pytest.raises(KubectlError) as refused:
            apply(api, route("zero", namespace, {"match": {"path": "/z"}, "backends": [{"service": "orders", "port": 8080, "weight": 0}]}))
        assert "at least one backend needs a weight above 0" in refused.value.stderr
        with pytest.raises(KubectlError) as refused:
            apply(api, route("slow", namespace, {"match": {"path": "/s"}, "backends": [{"service": "orders", "port": 8080}], "timeouts": {"request": "1s", "perTry": "3s"}}))
        assert "perTry must not exceed request" in refused.value.stderr

        # Valid for the API server's schema, wrong for Gatehouse: Accepted=False, others keep serving.
        apply(api, route("broken", namespace, {"match": {"path": "/orders/{id"}, "backends": [{"service": "orders", "port": 8080}]}))
        wait_for(lambda: conditions(api, namespace, "broken").get("Accepted", {}).get("status") == "False", 10, "Accepted=False")
        accepted = conditions(api, namespace, "broken")["Accepted"]
        assert accepted["reason"] == "Invalid"
        assert "spec.match.path" in accepted["message"] and "{id" in accepted["message"]
        assert stack.get("/good").upstream == "svc-a"

        # Same match on the same hosts: the newer Route loses, and is told so.
        time.sleep(1.1)  # creationTimestamp has one-second resolution
        apply(api, route("good-copy", namespace, {"match": {"pathPrefix": "/good"}, "backends": [{"service": "orders", "port": 8080}]}))
        wait_for(lambda: conditions(api, namespace, "good-copy").get("Accepted", {}).get("reason") == "Conflict", 10, "Conflict")
        assert f"{namespace}/good" in conditions(api, namespace, "good-copy")["Accepted"]["message"]
        assert conditions(api, namespace, "good")["Accepted"]["status"] == "True"
    finally:
        stack.stop()


def test_envoy_nack_is_reported_on_the_route_status(tmp_path: Path, api: KubeAPIServer, namespace: str, addresses: list[str], test_network: TestNetwork) -> None:
    stack = make_stack(tmp_path, api, namespace, addresses, test_network, envoy_runtime={"re2.max_program_size.error_level": 5})
    try:
        apply(api, service("orders", namespace), endpoint_slice("orders-a", namespace, "orders", stack.upstreams["svc-a"]))
        stack.start()
        apply(api, route("good", namespace, {"match": {"pathPrefix": "/good"}, "backends": [{"service": "orders", "port": 8080}]}))
        wait_for(lambda: stack.get("/good").status == 200, 10, "/good served")
        apply(api, route("regex", namespace, {"match": {"pathRegex": "/(orders|invoices)/[0-9]{4}"}, "backends": [{"service": "orders", "port": 8080}]}))

        def programmed() -> dict[str, Any]:
            return conditions(api, namespace, "regex").get("Programmed", {})

        wait_for(lambda: programmed().get("reason") == "Rejected", 15, "Programmed=False/Rejected on the Route")
        assert programmed()["status"] == "False"
        assert "program size" in programmed()["message"], programmed()
        assert stack.get("/good").upstream == "svc-a"
    finally:
        stack.stop()


def test_api_server_restart_keeps_routes_and_watches_resume(tmp_path: Path, api: KubeAPIServer, namespace: str, addresses: list[str], test_network: TestNetwork) -> None:
    stack = make_stack(tmp_path, api, namespace, addresses, test_network)
    try:
        apply(api, service("orders", namespace), endpoint_slice("orders-a", namespace, "orders", stack.upstreams["svc-a"]))
        stack.start()
        apply(api, route("orders", namespace, {"match": {"pathPrefix": "/orders"}, "backends": [{"service": "orders", "port": 8080}]}))
        wait_for(lambda: stack.get("/orders").status == 200, 10, "/orders served")

        with Load(stack.listener_port, ["/orders"], workers=2) as load:
            api.kill_apiserver()
            time.sleep(3)  # watches fail and retry; nothing may be dropped meanwhile
            api.start_apiserver()
            time.sleep(0.5)
        assert load.report.total > 50
        assert load.report.non_2xx == 0, load.report.failures[:5]

        apply(api, route("after", namespace, {"match": {"pathPrefix": "/after"}, "backends": [{"service": "orders", "port": 8080}]}))
        wait_for(lambda: stack.get("/after").status == 200, 30, "a Route applied after the restart")
        assert stack.get("/orders").status == 200
    finally:
        stack.stop()


def test_one_leader_writes_status_and_a_standby_takes_over(tmp_path: Path, api: KubeAPIServer, namespace: str, addresses: list[str], test_network: TestNetwork) -> None:
    lease = {"leaseDuration": "3s", "leaseRenew": "1s"}
    kubernetes = {"kubeconfig": str(api.kubeconfig), "namespaces": [namespace], "leaseNamespace": namespace, **lease}
    stack = GatewayStack(tmp_path / "stack", upstreams=(), kubernetes=kubernetes)
    stack.repo.commit("no Git routes")
    stack.set_endpoints({})
    standby = ControlPlaneProcess.write_config(
        tmp_path / "standby", repo=stack.repo.root, endpoints=stack.endpoints_path, listener_port=stack.listener_port, kubernetes=kubernetes
    )
    try:
        stack.upstreams["svc-a"] = EchoUpstream.start("svc-a", log_dir=tmp_path / "logs", host=addresses[0], network=test_network)
        apply(api, service("orders", namespace), endpoint_slice("orders-a", namespace, "orders", stack.upstreams["svc-a"]))
        stack.start()
        standby.start()
        planes = [stack.control_plane, standby]

        def leaders() -> list[ControlPlaneProcess]:
            return [p for p in planes if p.process is not None and p.process.alive() and kube_status(p)["leader"]]

        wait_for(lambda: len(leaders()) == 1, 15, "exactly one leader")
        leader = leaders()[0]
        follower = standby if leader is stack.control_plane else stack.control_plane

        apply(api, route("orders", namespace, {"match": {"pathPrefix": "/orders"}, "backends": [{"service": "orders", "port": 8080}]}))
        wait_for(lambda: conditions(api, namespace, "orders").get("Programmed", {}).get("status") == "True", 10, "status written")
        assert kube_status(follower)["status_writes"] == 0, "a follower must never write status"
        assert kube_status(leader)["status_writes"] > 0

        leader.kill()
        wait_for(lambda: kube_status(follower)["leader"], 15, "the standby taking the lease")
        apply(api, route("orders", namespace, {"match": {"pathPrefix": "/orders", "methods": ["GET"]}, "backends": [{"service": "orders", "port": 8080}]}))
        wait_for(lambda: conditions(api, namespace, "orders").get("Accepted", {}).get("observedGeneration") == 2, 15, "the new leader writing generation 2")
        assert kube_status(follower)["status_writes"] > 0
    finally:
        standby.stop()
        stack.stop()


def kube_status(plane: ControlPlaneProcess) -> dict[str, Any]:
    return next(s for s in plane.status()["sources"] if s["name"] == "kubernetes")
