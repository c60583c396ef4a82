"""Two control-plane replicas, one route-breaker board: a real API server holds the shared
ConfigMap (``kubernetes.breakerBoard``), each replica feeds its own real Envoy.

- an operator's move on either replica reaches both Envoys within a second;
- a restarted replica comes back with the shared phase: its Envoy never answers CLOSED;
- the detector: telemetry posts every tally to both replicas, only the Lease holder moves
  (one audited move), the other follows, and the holder's HALF_OPEN reaches both;
- the API server away: a move serves at once on its replica and reaches the other once
  the API server is back.
"""

from __future__ import annotations

import json
import secrets
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.harness.control_plane import ControlPlaneProcess
from tests.harness.envoy import EnvoyProcess
from tests.harness.gateway import GatewayStack
from tests.harness.http_client import get, wait_for
from tests.harness.kubernetes import KubeAPIServer
from tests.harness.ports import free_port
from tests.harness.route_repo import route_doc
from tests.harness.telemetry import TelemetryServiceProcess

CONFIG_MAP = "gatehouse-breakers"
BREAKER = {"errorRate": {"window": "30s", "minimumCalls": 10, "failureRateThreshold": 50, "waitInOpen": "3s", "halfOpenProbes": 2}}



@dataclass
class Replicas:
    api: KubeAPIServer
    namespace: str
    stack: GatewayStack
    other: ControlPlaneProcess
    other_envoy: EnvoyProcess | None
    other_port: int
    operator: str
    telemetry: TelemetryServiceProcess
    """Envoy A's access log goes to it; started by the test that needs it. It posts
    every tally to both replicas."""

    @property
    def planes(self) -> list[ControlPlaneProcess]:
        return [self.stack.control_plane, self.other]

    def start_other(self) -> None:
        self.other.start()
        if self.other_envoy is None:
            self.other_envoy = self.stack.start_envoy("gateway-1", control_plane=self.other)
            self.other_envoy.wait_live()

    def marked(self, port: int, path: str = "/orders") -> str | None:
        value: str | None = get(port, path).headers.get("x-gatehouse-breaker")
        return value

    def both(self, marker: str | None) -> bool:
        return self.marked(self.stack.listener_port) == marker and self.marked(self.other_port) == marker

    def move(self, plane: ControlPlaneProcess, action: str, **body: str) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{plane.admin_url}/breakers/default/orders/{action}", data=json.dumps(body).encode(), method="POST",
            headers={"Authorization": f"Bearer {self.operator}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer

    def phase(self, plane: ControlPlaneProcess) -> str:
        with urllib.request.urlopen(f"{plane.admin_url}/breakers?route=default/orders", timeout=5) as response:
            phase: str = json.loads(response.read())["breakers"][0]["phase"]
            return phase

    def leader(self) -> ControlPlaneProcess:
        def leading() -> list[ControlPlaneProcess]:
            return [p for p in self.planes if kube_status(p)["leader"]]

        wait_for(lambda: len(leading()) == 1, 15, "exactly one Lease holder")
        return leading()[0]

    def entries(self) -> dict[str, Any]:
        out = self.api.kubectl("get", "configmap", CONFIG_MAP, "-n", self.namespace, "-o", "json").stdout
        return {k: json.loads(v) for k, v in (json.loads(out).get("data") or {}).items()}


def kube_status(plane: ControlPlaneProcess) -> dict[str, Any]:
    return next(s for s in plane.status()["sources"] if s["name"] == "kubernetes")


def audited(plane: ControlPlaneProcess, actor: str) -> list[tuple[str, str]]:
    lines = [line for line in plane.log_tail(5000).splitlines() if '"breaker.transition"' in line]
    events = [json.loads(line) for line in lines]
    return [(e["subject"], e["details"]["to"]) for e in events if e.get("actor") == actor]


@pytest.fixture
def replicas(api: KubeAPIServer, tmp_path: Path) -> Iterator[Replicas]:
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    api.kubectl("create", "namespace", namespace)
    operator, tallies = tmp_path / "operator-credential", tmp_path / "tally-credential"
    operator.write_text(secrets.token_urlsafe(24))
    tallies.write_text(secrets.token_urlsafe(24))
    kubernetes = {
        "kubeconfig": str(api.kubeconfig), "namespaces": [namespace], "leaseNamespace": namespace,
        "leaseDuration": "3s", "leaseRenew": "1s", "breakerBoard": {"configMap": CONFIG_MAP},
    }
    extra = {"breakers": {"operatorCredentialFile": str(operator), "tallyCredentialFile": str(tallies)}}
    telemetry = TelemetryServiceProcess(tmp_path / "telemetry", sink={"stdout": {}})
    access_log = {"accessLog": {"address": telemetry.address, "bufferSize": 0, "flushInterval": "50ms"}}
    stack = GatewayStack(tmp_path / "a", upstreams=("svc-a",), control_plane_extra={**extra, **access_log}, kubernetes=kubernetes)
    stack.commit_routes({"r.yaml": [
        route_doc("ok", {"auth": {"required": False}, "match": {"pathPrefix": "/ok"}, "backends": [{"service": "svc-a", "port": 8080}]}),
        route_doc("orders", {"auth": {"required": False}, "match": {"pathPrefix": "/orders"}, "backends": [{"service": "svc-a", "port": 8080}], "circuitBreaker": BREAKER}),
    ]})
    other_port = free_port()
    other = ControlPlaneProcess.write_config(
        tmp_path / "b", repo=stack.repo.root, endpoints=stack.endpoints_path, listener_port=other_port,
        extra=extra, kubernetes=kubernetes,
    )
    telemetry.extra["breakerTallies"] = {
        "controlPlane": [stack.control_plane.admin_url, other.admin_url], "credentialFile": str(tallies), "flushInterval": "100ms",
    }
    found = Replicas(api, namespace, stack, other, None, other_port, operator.read_text(), telemetry)
    try:
        stack.start(wait_path="/ok")
        found.start_other()
        wait_for(lambda: get(other_port, "/ok").status == 200, 10, "the second replica's Envoy serving")
        yield found
    finally:
        telemetry.stop()
        if found.other_envoy is not None:
            found.other_envoy.stop()
        other.stop()
        stack.stop()


def test_an_operator_move_on_either_replica_reaches_both_envoys_within_a_second(replicas: Replicas) -> None:
    a, b = replicas.planes
    assert replicas.both(None), "CLOSED everywhere to begin with"
    replicas.move(b, "open", reason="INC-7")
    started = time.monotonic()
    wait_for(lambda: replicas.both("open"), 1, "both Envoys answering the OPEN fallback")
    opened_in = time.monotonic() - started
    entry = replicas.entries()["default.orders"]
    assert (entry["phase"], entry["pinned"], entry["actor"], entry["reason"]) == ("open", True, "operator", "INC-7")
    assert replicas.phase(a) == "open" and replicas.phase(b) == "open"

    replicas.move(a, "close")
    started = time.monotonic()
    wait_for(lambda: replicas.both(None), 1, "both Envoys proxying again")
    assert opened_in < 1 and time.monotonic() - started < 1
    assert replicas.entries()["default.orders"]["phase"] == "closed"
    # Each move is audited once, by the replica that made it; the other only followed.
    assert audited(b, "operator") == [("default/orders", "open")] and audited(a, "operator") == [("default/orders", "closed")]


def test_a_restarted_replica_comes_back_with_the_shared_phase_and_its_envoy_never_answers_closed(replicas: Replicas) -> None:
    a, b = replicas.planes
    replicas.move(a, "open", reason="INC-8")
    wait_for(lambda: replicas.both("open"), 1, "both OPEN")
    b.stop()
    replicas.start_other()  # a fresh process: an empty board until it reads the ConfigMap
    answers = set()
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        answers.add(replicas.marked(replicas.other_port))
    assert answers == {"open"}, f"the restarted replica's Envoy answered {answers}"
    assert replicas.phase(b) == "open"
    assert kube_status(b)["breaker_board"]["synced"] is True
    # Why it never could: the restarted process adopted the shared state before it
    # published its first snapshot.
    lines = b.log_tail(3000).splitlines()
    since_start = lines[max(i for i, line in enumerate(lines) if '"control_plane_started"' in line):]
    events = [json.loads(line)["event"] for line in since_start if line.startswith("{")]
    assert "breaker_adopted" in events and "first_sync_complete" in events, events
    assert events.index("breaker_adopted") < events.index("first_sync_complete"), events


def test_only_the_lease_holder_judges_and_every_envoy_follows_its_moves(replicas: Replicas) -> None:
    a, b = replicas.planes
    leader = replicas.leader()
    follower = b if leader is a else a
    telemetry = replicas.telemetry.start()
    assert telemetry.process is not None
    process = telemetry.process
    wait_for(lambda: '"breaker_rules"' in process.log_tail(500), 10, "telemetry has the rules")
    upstream = replicas.stack.upstreams["svc-a"]
    urllib.request.urlopen(urllib.request.Request(f"{upstream.url}/admin/fail?status=503", method="POST"), timeout=5).close()
    for i in range(10):  # through Envoy A, whose access log telemetry counts for both replicas
        get(replicas.stack.listener_port, f"/orders/{i}")
    wait_for(lambda: replicas.both("open"), 5, "both Envoys OPEN after the Lease holder's verdict")
    assert audited(leader, "detector") == [("default/orders", "open")]
    assert audited(follower, "detector") == [], "the follower counted the same calls but did not move"
    assert sum(p.metric("gatehouse_breaker_detector_transitions_total", to="open") for p in replicas.planes) == 1.0
    # waitInOpen 3s: the Lease holder's timer half-opens it, the follower adopts that.
    wait_for(lambda: replicas.phase(a) == "half-open" and replicas.phase(b) == "half-open", 8, "HALF_OPEN on both")
    assert audited(follower, "detector") == []


def test_with_the_api_server_away_a_move_serves_at_once_and_reaches_the_other_replica_when_it_is_back(replicas: Replicas) -> None:
    """Down for longer than the lease (3 s): no replica can know who leads, so the one that
    opened the breaker half-opens it on time by itself; the other follows afterwards."""
    a, _ = replicas.planes
    replicas.api.stop_apiserver()
    try:
        replicas.move(a, "open", reason="during the outage", openFor="2s")
        wait_for(lambda: replicas.marked(replicas.stack.listener_port) == "open", 1, "Envoy A OPEN at once")
        time.sleep(1.0)
        assert replicas.marked(replicas.other_port) is None, "nothing can reach the other replica meanwhile"
        wait_for(lambda: replicas.phase(a) == "half-open", 8, "replica A half-opening on time without the API server")
    finally:
        replicas.api.start_apiserver()
    b = replicas.other
    wait_for(lambda: replicas.phase(b) == "half-open", 30, "the other replica following once the API server is back")
    assert replicas.entries()["default.orders"]["phase"] == "half-open"
