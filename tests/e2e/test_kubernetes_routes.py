"""`kubectl apply` a Route, and Envoy serves it: against a real API server, real Envoy."""

from __future__ import annotations

import json
import subprocess
import sys
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
from tests.harness.route_repo import route_doc
from tests.harness.upstream import EchoUpstream

REPO_ROOT = Path(__file__).resolve().parents[2]
CRD = REPO_ROOT / "charts" / "gatehouse" / "crds" / "routes.gatehouse.io.yaml"
REFERENCE_GRANT_CRD = REPO_ROOT / "charts" / "gatehouse" / "crds" / "gateway.networking.k8s.io_referencegrants.yaml"


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPIServer]:
    envoy_binary()
    server = KubeAPIServer.start(tmp_path_factory.mktemp("kube"))
    try:
        server.kubectl("apply", "-f", str(CRD))
        server.kubectl("apply", "--server-side", "-f", str(REFERENCE_GRANT_CRD))  # as the chart installs it
        server.wait_established("routes.gatehouse.io")
        server.wait_established("referencegrants.gateway.networking.k8s.io")
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
    """A Route; public unless ``spec`` says otherwise (these stacks have no ext_authz, and a
    route asking for a token would be refused)."""
    spec = {"auth": {"required": False}, **spec}
    return {"apiVersion": "gatehouse.io/v1alpha1", "kind": "Route", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def service(name: str, namespace: str, port: int = 8080) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        # A selector: the slices below are then the EndpointSlice controller's to write
        # (this API server has none, so the test writes them, with its label).
        "spec": {"ports": [{"name": "http", "port": port, "protocol": "TCP"}], "selector": {"app": name}},
    }


def endpoint_slice(name: str, namespace: str, service_name: str, upstream: EchoUpstream, **conditions: bool) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"kubernetes.io/service-name": service_name, "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"},
        },
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
        # A route can neither forge an identity for its upstream nor be selected by one a client sends.
        with pytest.raises(KubectlError) as refused:
            apply(api, route("forge", namespace, {"match": {"path": "/f"}, "backends": [{"service": "orders", "port": 8080}],
                                                  "headers": {"request": {"set": {"x-user-id": "alice"}}}}))
        assert "a route may not set or remove them" in refused.value.stderr
        with pytest.raises(KubectlError) as refused:
            apply(api, route("strip", namespace, {"match": {"path": "/f"}, "backends": [{"service": "orders", "port": 8080}],
                                                  "headers": {"request": {"remove": ["x-gatehouse-route"]}}}))
        assert "a route may not set or remove them" in refused.value.stderr
        with pytest.raises(KubectlError) as refused:
            apply(api, route("admins", namespace, {"match": {"path": "/f", "headers": [{"name": "x-user-role", "exact": "admin"}]},
                                                   "backends": [{"service": "orders", "port": 8080}]}))
        assert "cannot select a route" in refused.value.stderr

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


def reference_grant(name: str, namespace: str, from_namespace: str, service: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1beta1",
        "kind": "ReferenceGrant",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "from": [{"group": "gatehouse.io", "kind": "Route", "namespace": from_namespace}],
            "to": [{"group": "", "kind": "Service", **({"name": service} if service else {})}],
        },
    }


def test_cross_namespace_backends_need_a_reference_grant(tmp_path: Path, api: KubeAPIServer, namespace: str, addresses: list[str], test_network: TestNetwork) -> None:
    """Issue 24, hole 9: a Route in one namespace ("evil") naming a Service in another
    ("shop") is not served, and says why (ResolvedRefs=False), until shop holds a
    ReferenceGrant; granting and revoking work without a restart; a same-namespace route
    is unaffected. Grants from the cluster count for Git routes too; a grant written in
    the Git repo does not open shop to the cluster's Routes."""
    evil, shop = namespace, f"shop-{uuid.uuid4().hex[:8]}"
    api.kubectl("create", "namespace", shop)
    stack = make_stack(tmp_path, api, evil, addresses, test_network, git_namespaces=[evil, shop])
    try:
        a, b = stack.upstreams["svc-a"], stack.upstreams["svc-b"]
        apply(
            api,
            service("orders", shop), endpoint_slice("orders-a", shop, "orders", a),
            service("payments", shop), endpoint_slice("payments-a", shop, "payments", a),
            service("local", evil), endpoint_slice("local-b", evil, "local", b),
        )  # fmt: skip
        to_orders = [{"service": "orders", "port": 8080, "namespace": shop}]
        stack.commit_routes({
            "git.yaml": [
                route_doc("git-steal", {"auth": {"required": False}, "match": {"pathPrefix": "/git-steal"}, "backends": to_orders}, namespace=evil),
                reference_grant("repo-grant", shop, evil, "payments"),
            ],
        })  # fmt: skip
        stack.start()
        pid = stack.control_plane.process.pid if stack.control_plane.process else None
        # In this order: one watch delivers them in order, so once /own is served the
        # others have been judged too.
        apply(
            api,
            route("steal", evil, {"match": {"pathPrefix": "/steal"}, "backends": to_orders}),
            route("pay", evil, {"match": {"pathPrefix": "/pay"}, "backends": [{"service": "payments", "port": 8080, "namespace": shop}]}),
            route("own", evil, {"match": {"pathPrefix": "/own"}, "backends": [{"service": "local", "port": 8080}]}),
        )  # fmt: skip
        wait_for(lambda: stack.get("/own").upstream == "svc-b", 10, "the same-namespace route served")
        assert [stack.get(p).status for p in ("/steal", "/pay", "/git-steal")] == [404, 404, 404]

        def refs(name: str) -> dict[str, Any]:
            return conditions(api, namespace, name).get("ResolvedRefs", {})

        wait_for(lambda: refs("steal").get("status") == "False" and refs("pay").get("status") == "False", 10, "ResolvedRefs=False")
        steal = conditions(api, evil, "steal")
        assert steal["ResolvedRefs"]["reason"] == "RefNotPermitted"
        assert f"spec.backends[0]: Service {shop}/orders is in another namespace" in steal["ResolvedRefs"]["message"]
        assert f"{shop} needs a ReferenceGrant from {{group: gatehouse.io, kind: Route, namespace: {evil}}}" in steal["ResolvedRefs"]["message"]
        assert (steal["Programmed"]["status"], steal["Programmed"]["reason"]) == ("False", "NotServing")
        assert steal["Accepted"]["status"] == "True"
        assert refs("own")["status"] == "True"
        # The repo's own grant (to payments) counts for the repo's routes only.
        status = stack.control_plane.status()
        assert {u["route"] for u in status["unresolved"]} == {f"{evil}/steal", f"{evil}/pay", f"{evil}/git-steal"}
        shown = subprocess.run(
            [sys.executable, "-m", "gatehouse", "status", "--admin", stack.control_plane.admin_url],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert f"route {evil}/steal (kubernetes:{evil}/steal" in shown.stdout and "NOT SERVED, ResolvedRefs=False" in shown.stdout, shown.stdout

        with Load(stack.listener_port, ["/own"], workers=2) as load:
            granted = time.monotonic()
            apply(api, reference_grant("evil-to-orders", shop, evil, "orders"))
            wait_for(lambda: stack.get("/steal").upstream == "svc-a", 10, "/steal served once granted", interval=0.005)
            latency = time.monotonic() - granted  # from kubectl's start: an upper bound
            stack.wait_upstream("/git-steal", "svc-a")  # a cluster grant counts for Git routes too
            assert stack.get("/pay").status == 404, "the grant names orders only"
            wait_for(lambda: refs("steal").get("status") == "True", 10, "ResolvedRefs=True")
            wait_for(lambda: conditions(api, evil, "steal").get("Programmed", {}).get("status") == "True", 10, "Programmed=True")

            api.kubectl("delete", "referencegrant", "evil-to-orders", "-n", shop)
            revoked = time.monotonic()
            wait_for(lambda: stack.get("/steal").status == 404, 10, "/steal no longer served once revoked", interval=0.005)
            stopped = time.monotonic() - revoked
            assert stack.get("/git-steal").status == 404
            wait_for(lambda: refs("steal").get("status") == "False", 10, "ResolvedRefs=False again")
        print(f"\ngrant → served: {latency * 1000:.0f} ms (kubectl included); grant deleted → 404: {stopped * 1000:.0f} ms")
        assert stopped < 1.5, f"a revoked grant kept the route served for {stopped:.2f}s"
        assert load.report.total > 50 and load.report.non_2xx == 0, load.report.failures[:5]
        assert stack.control_plane.process is not None and stack.control_plane.process.pid == pid and stack.control_plane.process.alive()
    finally:
        stack.stop()
