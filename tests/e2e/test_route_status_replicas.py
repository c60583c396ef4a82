"""Route status with two control-plane replicas (issue 25, item 4).

The Lease holder writes every Route's status, but an Envoy may be connected to another
replica only: before, the holder never saw its ACK and the Route stayed
``Programmed=Unknown`` while Envoy served it. Through the shared route ACKs
(``kubernetes.routeAcks``, one ConfigMap) the holder hears every replica's Envoys.

A real API server, two control-plane processes, and one real Envoy attached to the
non-leader only:

- a Route applied: ``Programmed=True`` on it within 2 s of that Envoy serving it (its ACK),
  written by the Lease holder, which has no Envoy of its own;
- a Route that Envoy refuses: ``Programmed=False``, reason ``Rejected``, with Envoy's message.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.control_plane import ControlPlaneProcess
from tests.harness.envoy import EnvoyProcess
from tests.harness.gateway import GatewayStack
from tests.harness.http_client import get, wait_for
from tests.harness.kubernetes import KubeAPIServer
from tests.harness.ports import free_port

CONFIG_MAP = "gatehouse-route-acks"
HUGE_REGEX = "/(orders|invoices)/[0-9]{4}"
"""Refused by an Envoy whose regex program size limit is 5 (its runtime below)."""



@dataclass
class Replicas:
    api: KubeAPIServer
    namespace: str
    leader: ControlPlaneProcess
    follower: ControlPlaneProcess
    envoy: EnvoyProcess
    port: int
    """The follower's gateway listener: where its Envoy serves."""

    def apply(self, name: str, spec: dict[str, Any]) -> None:
        """A public Route (this stack has no ext_authz, and a route asking for a token would be refused)."""
        spec = {"auth": {"required": False}, **spec}
        doc = {"apiVersion": "gatehouse.io/v1alpha1", "kind": "Route", "metadata": {"name": name, "namespace": self.namespace}, "spec": spec}
        self.api.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))

    def programmed(self, name: str) -> dict[str, Any]:
        status, body = self.api.request("GET", f"/apis/gatehouse.io/v1alpha1/namespaces/{self.namespace}/routes/{name}")
        assert status == 200, body
        conditions = {c["type"]: c for c in (body.get("status") or {}).get("conditions", [])}
        return conditions.get("Programmed", {})


def kube_status(plane: ControlPlaneProcess) -> dict[str, Any]:
    return next(s for s in plane.status()["sources"] if s["name"] == "kubernetes")


@pytest.fixture
def replicas(api: KubeAPIServer, tmp_path: Path) -> Iterator[Replicas]:
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    api.kubectl("create", "namespace", namespace)
    kubernetes = {
        "kubeconfig": str(api.kubeconfig), "namespaces": [namespace], "leaseNamespace": namespace,
        "leaseDuration": "3s", "leaseRenew": "1s", "routeAcks": {"configMap": CONFIG_MAP},
    }
    stack = GatewayStack(tmp_path / "a", upstreams=(), kubernetes=kubernetes)
    stack.repo.commit("no Git routes")
    stack.set_endpoints({})
    other_port = free_port()
    other = ControlPlaneProcess.write_config(
        tmp_path / "b", repo=stack.repo.root, endpoints=stack.endpoints_path, listener_port=other_port, kubernetes=kubernetes,
    )
    planes = [stack.control_plane, other]
    envoy: EnvoyProcess | None = None
    try:
        for plane in planes:
            plane.start()

        def leaders() -> list[ControlPlaneProcess]:
            return [p for p in planes if kube_status(p)["leader"]]

        wait_for(lambda: len(leaders()) == 1, 15, "exactly one Lease holder")
        leader = leaders()[0]
        follower = other if leader is stack.control_plane else stack.control_plane
        # Envoy on the follower only; a strict regex limit, so that it refuses a route.
        envoy = stack.start_envoy("gateway-1", control_plane=follower, runtime={"re2.max_program_size.error_level": 5})
        envoy.wait_live()
        port = other_port if follower is other else stack.listener_port
        yield Replicas(api, namespace, leader, follower, envoy, port)
    finally:
        if envoy is not None:
            envoy.stop()
        other.stop()
        stack.stop()


def test_programmed_true_within_two_seconds_of_an_ack_from_the_non_leaders_envoy(replicas: Replicas) -> None:
    assert replicas.leader.status()["proxies"] == [], "the Lease holder has no Envoy of its own"
    replicas.apply("hello", {"match": {"pathPrefix": "/hello"}, "disabled": {"status": 200, "body": "hello"}})
    wait_for(lambda: get(replicas.port, "/hello").status == 200, 15, "the follower's Envoy serving /hello", interval=0.005)
    served = time.monotonic()  # Envoy ACKs the config it serves
    wait_for(lambda: replicas.programmed("hello").get("status") == "True", 10, "Programmed=True on the Route", interval=0.02)
    took = time.monotonic() - served
    print(f"\nEnvoy on the non-leader serving → Programmed=True: {took * 1000:.0f} ms")
    assert took <= 2.0, f"Programmed=True came {took:.2f} s after the ACK"
    condition = replicas.programmed("hello")
    assert (condition["reason"], condition["observedGeneration"]) == ("Programmed", 1), condition
    assert kube_status(replicas.follower)["status_writes"] == 0, "only the Lease holder writes status"
    assert kube_status(replicas.leader)["route_acks"]["peers"] == 1
    entries = json.loads(replicas.api.kubectl("get", "configmap", CONFIG_MAP, "-n", replicas.namespace, "-o", "json").stdout)["data"]
    (mine,) = [json.loads(text) for text in entries.values() if f"{replicas.namespace}/hello" in json.loads(text)["routes"]]
    assert mine["routes"][f"{replicas.namespace}/hello"][1] == "", "the follower's Envoy ACKed it"


def test_a_route_the_non_leaders_envoy_refuses_is_programmed_false_rejected(replicas: Replicas) -> None:
    replicas.apply("ok", {"match": {"pathPrefix": "/ok"}, "disabled": {"status": 200, "body": "ok"}})
    wait_for(lambda: replicas.programmed("ok").get("status") == "True", 15, "Programmed=True on ok")
    replicas.apply("regex", {"match": {"pathRegex": HUGE_REGEX}, "disabled": {"status": 200, "body": "regex"}})
    wait_for(lambda: replicas.programmed("regex").get("reason") == "Rejected", 15, "Programmed=False/Rejected on the Route")
    condition = replicas.programmed("regex")
    assert condition["status"] == "False" and "Envoy rejected it" in condition["message"], condition
    assert get(replicas.port, "/ok").status == 200, "the Envoy keeps its last accepted config"
