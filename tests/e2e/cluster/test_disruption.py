"""Disruptions under load, with wrk inside the cluster's namespace sending to the gateway
Service the whole time: a control-plane pod deleted, a ``helm upgrade`` that rolls every
gateway pod, and the ext_authz sidecar killed in one gateway pod."""

from __future__ import annotations

import subprocess
import threading
import time

from tests.e2e.cluster.conftest import KubeSession, unique, wait_for
from tests.harness.cluster import chart
from tests.harness.cluster.load import Wrk

EXAMPLE = "/api/v2/orders/42"


def _all_ready(kube: KubeSession, component: str, count: int) -> bool:
    pods = kube.pods(component)
    return len(pods) == count and all(
        any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", [])) for p in pods)


def test_deleting_a_control_plane_pod_fails_no_request(kube: KubeSession) -> None:
    victim = kube.pods("control-plane")[0]["metadata"]["name"]
    load = Wrk(kube.cluster, kube.gateway + EXAMPLE, duration=15, connections=4, headers=[f"Authorization: Bearer {kube.default_token}"]).start()
    time.sleep(4)
    kube.cluster.kubectl("-n", kube.namespace, "delete", "pod", victim, "--wait=false")
    result = load.wait()
    print(result.report)
    assert result.requests > 100, result.report
    assert result.failed == 0, result.report
    wait_for(lambda: _all_ready(kube, "control-plane", 2), 120, "two control-plane pods Ready again", 1)
    assert victim not in {p["metadata"]["name"] for p in kube.pods("control-plane")}


def test_a_helm_upgrade_rolling_every_gateway_pod_fails_no_request(kube: KubeSession) -> None:
    before = {p["metadata"]["name"] for p in kube.pods("gateway")}
    load = Wrk(kube.cluster, kube.gateway + EXAMPLE, duration=600, connections=4, headers=[f"Authorization: Bearer {kube.default_token}"]).start()
    time.sleep(3)
    started = time.monotonic()
    kube.cluster.helm("upgrade", kube.release, str(chart.CHART), "--namespace", kube.namespace, "--reuse-values",
                      "--set-string", f"gateway.podAnnotations.rolled={int(time.time())}", "--wait", "--timeout", "5m", timeout=400)
    wait_for(lambda: _all_ready(kube, "gateway", 2) and not before & {p["metadata"]["name"] for p in kube.pods("gateway")},
             180, "every gateway pod replaced", 1)
    rolled = time.monotonic() - started
    time.sleep(2)
    result = load.stop()
    print(f"rollout {rolled:.0f}s\n{result.report}")
    assert result.requests > 100, result.report
    assert result.failed == 0, result.report


def test_a_killed_ext_authz_is_restarted_and_refuses_meanwhile(kube: KubeSession) -> None:
    name, path = unique("authz"), f"/{unique('authz')}/orders"
    kube.apply(kube.route(name, {"match": {"path": path}, "backends": [{"service": "order-service", "port": 8080}],
                                 "auth": {"required": True, "audiences": ["api"]}}))
    pod = kube.pods("gateway")[0]
    pod_url = f"http://{pod['status']['podIP']}:8080"
    auth = {"authorization": f"Bearer {kube.token()}"}
    wait_for(lambda: kube.get(path, headers=auth, base=pod_url)[0] == 200, 10, "served with a token")

    def container(status: dict) -> dict:
        return next(c for c in status["containerStatuses"] if c["name"] == "ext-authz")

    before = container(pod["status"])
    answers: list[tuple[float, int]] = []
    stop = threading.Event()

    def send() -> None:
        while not stop.is_set():
            try:
                status = kube.get(path, headers=auth, base=pod_url)[0]
            except OSError:
                status = -1
            answers.append((time.monotonic(), status))

    sender = threading.Thread(target=send)
    sender.start()
    try:
        time.sleep(1)
        killed_at = time.monotonic()
        container_id = before["containerID"].removeprefix("containerd://")
        subprocess.run(["ctr", "--address", str(kube.cluster.layout.containerd_socket), "--namespace", "k8s.io",
                        "tasks", "kill", "--signal", "SIGKILL", container_id], check=True, capture_output=True, timeout=30)

        def restarted() -> dict | None:
            current = kube.cluster.kubectl_json("-n", kube.namespace, "get", "pod", pod["metadata"]["name"])
            now = container(current["status"])
            return now if now["restartCount"] == before["restartCount"] + 1 and now["ready"] else None

        after = wait_for(restarted, 120, "the kubelet restarted ext-authz and it is ready", 0.5)
        wait_for(lambda: any(t > time.monotonic() - 1 and s == 200 for t, s in answers[-20:]), 30, "served again")
        time.sleep(1)
    finally:
        stop.set()
        sender.join(30)
    after_kill = [(t, s) for t, s in answers if t >= killed_at]
    statuses = [s for _, s in after_kill]
    refusals = [t for t, s in after_kill if s != 200]
    outage = f"{refusals[-1] - refusals[0]:.1f}s" if refusals else "none"
    print(f"after the kill: {len(statuses)} answers, {dict((s, statuses.count(s)) for s in set(statuses))}, refused for {outage}")
    refused = [i for i, s in enumerate(statuses) if s != 200]
    assert refused, "no request was refused while ext_authz was down"
    assert set(statuses[i] for i in refused) <= {403, 503}, statuses
    # 200s (in flight before the kill took effect), refusals only, then 200s again: nothing
    # was let through between the first refusal and the last.
    assert all(s != 200 for s in statuses[refused[0]:refused[-1] + 1]), statuses
    assert statuses[-1] == 200 and statuses[refused[-1] + 1:] and set(statuses[refused[-1] + 1:]) == {200}
    assert after["restartCount"] == before["restartCount"] + 1
