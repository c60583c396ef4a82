"""The chart's probes as a real kubelet applies them (found on the cluster of
tests/e2e/cluster/: two control-plane pods killed by their liveness probe before their
first start finished, on a node where every pod started at once)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.test_helm_chart import VARIANTS, containers, objects, template
from tests.harness.kubernetes import KubeTools, kube_tools


@pytest.fixture(scope="module")
def tools() -> KubeTools:
    return kube_tools()


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_liveness_probe_waits_for_a_startup_probe(tools: KubeTools, tmp_path: Path, variant: str) -> None:
    """A liveness probe alone (10 s delay, 3 × 10 s) restarted a Python container that had
    not opened its port yet; the startup probe, on the same endpoint, holds liveness off
    until the process answers, for up to 3 minutes."""
    found = containers(objects(template(tools, tmp_path, *VARIANTS[variant])))
    checked = 0
    for name, container in found.items():
        liveness = container.get("livenessProbe")
        if liveness is None or container["name"] == "redis":
            continue
        startup = container.get("startupProbe")
        assert startup is not None, f"{name}: a livenessProbe without a startupProbe"
        assert startup["httpGet"] == liveness["httpGet"], name
        allowed = startup["periodSeconds"] * startup["failureThreshold"]
        assert allowed >= 120, f"{name}: the startup probe gives up after {allowed}s"
        checked += 1
    assert checked >= (1 if variant == "defaults" else 2)
