"""The chart's defaults, rendered with real helm: NetworkPolicies on (the control plane's xDS
and admin ports only from the gateway pods and the peers the operator lists), reads of the
admin port never open by address (behind a mesh sidecar every peer is loopback), and the
EndpointSlice trust reaching the control plane's config.

What is tested is the rendered policy, not its enforcement: the cluster of scripts/cluster
runs the CNI bridge plugin, which enforces no NetworkPolicy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.test_helm_chart import CONTROL_PLANE, GATEWAY, NAMESPACE, RELEASE, find, objects, template
from tests.harness.kubernetes import KubeTools, kube_tools

GATEWAY_PODS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "gatehouse", "app.kubernetes.io/instance": RELEASE, "app.kubernetes.io/component": "gateway"}},
}


@pytest.fixture(scope="module")
def tools() -> KubeTools:
    return kube_tools()


def control_plane_config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    data = find(docs, "ConfigMap", CONTROL_PLANE)["data"]
    config: dict[str, Any] = yaml.safe_load(next(v for k, v in data.items() if k.endswith((".yaml", ".yml"))))
    return config


def test_by_default_the_control_plane_takes_xds_only_from_gateway_pods_and_its_admin_port_from_nobody(tools: KubeTools, tmp_path: Path) -> None:
    docs = objects(template(tools, tmp_path))
    spec = find(docs, "NetworkPolicy", CONTROL_PLANE)["spec"]
    assert spec["policyTypes"] == ["Ingress"]  # egress (Git, the Kubernetes API) untouched
    (rule,) = spec["ingress"]  # adminFrom is empty: no second rule
    assert rule["from"] == [GATEWAY_PODS]
    assert rule["ports"] == [{"port": "xds", "protocol": "TCP"}]
    deployment = find(docs, "Deployment", CONTROL_PLANE)
    assert spec["podSelector"]["matchLabels"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    gateway = find(docs, "Deployment", GATEWAY)["spec"]["template"]["metadata"]["labels"]
    assert GATEWAY_PODS["podSelector"]["matchLabels"].items() <= gateway.items()
    # Every rule names its peers: nothing is open to every pod.
    for policy in (d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == CONTROL_PLANE):
        assert all(r.get("from") for r in policy["spec"]["ingress"]), policy


def test_by_default_reads_of_the_admin_port_are_never_open_by_address(tools: KubeTools, tmp_path: Path) -> None:
    config = control_plane_config(objects(template(tools, tmp_path)))
    assert config["admin"]["openReads"] == "never"
    assert config["admin"]["readCredentialFile"]


def test_endpoint_slice_trust_reaches_the_control_plane(tools: KubeTools, tmp_path: Path) -> None:
    default = control_plane_config(objects(template(tools, tmp_path)))["sources"]["kubernetes"]["endpointSlices"]
    assert default == {"trustedManagers": ["endpointslice-controller.k8s.io"], "addressRanges": []}
    chosen = control_plane_config(objects(template(
        tools, tmp_path,
        "--set-json", 'controlPlane.kubernetes.endpointSlices={"trustedManagers":["endpointslice-controller.k8s.io","examples.gatehouse.io"],"addressRanges":["10.244.0.0/16"]}',
    )))["sources"]["kubernetes"]["endpointSlices"]
    assert chosen == {"trustedManagers": ["endpointslice-controller.k8s.io", "examples.gatehouse.io"], "addressRanges": ["10.244.0.0/16"]}


def test_policies_can_still_be_switched_off_and_a_bad_trust_setting_is_refused(tools: KubeTools, tmp_path: Path) -> None:
    off = objects(template(tools, tmp_path, "--set", "networkPolicy.enabled=false"))
    assert not [d for d in off if d["kind"] == "NetworkPolicy"]
    with pytest.raises(AssertionError, match="trustedManagers"):
        template(tools, tmp_path, "--set-json", 'controlPlane.kubernetes.endpointSlices={"trustedManagers":[""]}')
