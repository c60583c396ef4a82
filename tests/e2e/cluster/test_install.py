"""``helm install`` on a real cluster: every pod Ready with no restarts, and the chart's
CRD, RBAC, PDBs and NetworkPolicies in place and doing what they say."""

from __future__ import annotations

from tests.e2e.cluster.conftest import KubeSession


def _ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def test_every_pod_ready_without_restarts(kube: KubeSession) -> None:
    pods = kube.cluster.kubectl_json("-n", kube.namespace, "get", "pods")["items"]
    by_component: dict[str, list[dict]] = {}
    for pod in pods:
        by_component.setdefault(pod["metadata"]["labels"]["app.kubernetes.io/component"], []).append(pod)
    assert {k: len(v) for k, v in by_component.items()} == {"control-plane": 2, "gateway": 2, "redis": 1}
    for pod in pods:
        name = pod["metadata"]["name"]
        assert _ready(pod), f"{name} not Ready: {pod['status']}"
        for container in pod["status"]["containerStatuses"]:
            assert container["restartCount"] == 0, f"{name}/{container['name']} restarted: {container.get('lastState')}"
            assert container["ready"], f"{name}/{container['name']} not ready"
    gateway_containers = {c["name"] for c in by_component["gateway"][0]["spec"]["containers"]}
    assert gateway_containers == {"envoy", "ext-authz", "ratelimit"}
    shop = kube.cluster.kubectl_json("-n", "shop", "get", "pods")["items"]
    assert shop and all(_ready(p) for p in shop)


def test_the_locally_built_images_never_pulled(kube: KubeSession) -> None:
    images = kube.cluster.images
    for pod in kube.cluster.kubectl_json("-n", kube.namespace, "get", "pods")["items"]:
        for container in pod["spec"]["containers"]:
            assert container["imagePullPolicy"] == "Never"
            expected = images["redis"] if container["name"] == "redis" else images["gatehouse"]
            assert container["image"] == expected.reference


def test_crd_rbac_pdbs_and_network_policies_present(kube: KubeSession) -> None:
    crd = kube.cluster.kubectl_json("get", "crd", "routes.gatehouse.io")
    assert {c["type"]: c["status"] for c in crd["status"]["conditions"]}["Established"] == "True"
    role = f"{kube.namespace}-{kube.release}-control-plane"
    assert kube.cluster.kubectl("get", "clusterrole", role, check=False).returncode == 0
    assert kube.cluster.kubectl("get", "clusterrolebinding", role, check=False).returncode == 0
    roles = {r["metadata"]["name"] for r in kube.cluster.kubectl_json("-n", kube.namespace, "get", "roles")["items"]}
    assert f"{kube.release}-control-plane" in roles
    pdbs = {p["metadata"]["name"]: p for p in kube.cluster.kubectl_json("-n", kube.namespace, "get", "pdb")["items"]}
    assert set(pdbs) == {f"{kube.release}-control-plane", f"{kube.release}-gateway"}
    for name, pdb in pdbs.items():
        status = pdb["status"]
        assert status["currentHealthy"] == 2 and status["desiredHealthy"] == 1 and status["disruptionsAllowed"] == 1, (name, status)
    policies = {p["metadata"]["name"] for p in kube.cluster.kubectl_json("-n", kube.namespace, "get", "networkpolicy")["items"]}
    # The control plane's xDS and admin ports, and the trial Redis, accept only the pods they
    # serve. (Rendered and accepted here; the bridge CNI does not enforce NetworkPolicies.)
    assert {f"{kube.release}-control-plane", f"{kube.release}-redis"} <= policies


def test_each_component_acts_with_its_own_least_privileged_identity(kube: KubeSession) -> None:
    """Real RBAC: the control plane's service account may read Routes and write their status,
    never delete pods or read Secrets outside its namespace; the gateway's may do nothing."""
    control_plane = f"system:serviceaccount:{kube.namespace}:{kube.release}-control-plane"
    gateway = f"system:serviceaccount:{kube.namespace}:{kube.release}-gateway"

    def can(who: str, *what: str) -> str:
        return kube.cluster.kubectl("auth", "can-i", f"--as={who}", *what, check=False).stdout.strip()

    assert can(control_plane, "watch", "routes.gatehouse.io", "-A") == "yes"
    assert can(control_plane, "patch", "routes.gatehouse.io", "--subresource=status", "-n", "shop") == "yes"
    assert can(control_plane, "patch", "routes.gatehouse.io", "-n", "shop") == "no"
    assert can(control_plane, "delete", "pods", "-n", kube.namespace) == "no"
    assert can(control_plane, "get", "secrets", "-n", "kube-system") == "no"
    assert can(gateway, "list", "pods", "-n", kube.namespace) == "no"
    assert can(gateway, "get", "routes.gatehouse.io", "-n", "shop") == "no"
    # The gateway pods carry no token at all.
    for pod in kube.pods("gateway"):
        assert pod["spec"]["automountServiceAccountToken"] is False
        mounts = [m["mountPath"] for c in pod["spec"]["containers"] for m in c.get("volumeMounts", [])]
        assert "/var/run/secrets/kubernetes.io/serviceaccount" not in mounts
