"""Issue 24, hole 9, for Git routes: a route's namespace is its ``metadata.namespace``, and
a backend in another namespace needs a ReferenceGrant, written in the same repo (or, with
a Kubernetes source, in the cluster: tests/e2e/test_kubernetes_routes.py). Through a real
Envoy: not served (404) without one, served once it is committed, not served once removed."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from tests.harness.route_repo import route_doc
from tests.integration.conftest import StackFactory

GRANT = {
    "apiVersion": "gateway.networking.k8s.io/v1beta1",
    "kind": "ReferenceGrant",
    "metadata": {"name": "evil-to-orders", "namespace": "shop"},
    "spec": {"from": [{"group": "gatehouse.io", "kind": "Route", "namespace": "evil"}], "to": [{"group": "", "kind": "Service", "name": "svc-a"}]},
}


def validate(path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gatehouse", "validate", path], capture_output=True, text=True, timeout=60)


def test_git_routes_need_a_reference_grant_for_a_backend_in_another_namespace(make_stack: StackFactory) -> None:
    stack = make_stack(upstreams=("svc-a", "svc-b"), git_namespaces=["evil", "shop"])
    routes: list[dict[str, Any]] = [
        route_doc("steal", {"auth": {"required": False}, "match": {"pathPrefix": "/steal"}, "backends": [{"service": "svc-a", "port": 8080, "namespace": "shop"}]}, namespace="evil"),
        route_doc("own", {"auth": {"required": False}, "match": {"pathPrefix": "/own"}, "backends": [{"service": "svc-b", "port": 8080}]}, namespace="evil"),
    ]
    stack.commit_routes({"routes.yaml": routes})
    stack.start(wait_path="/own")
    assert stack.get("/steal").status == 404, "served without a grant"
    [left_out] = stack.control_plane.status()["unresolved"]
    assert left_out["route"] == "evil/steal" and left_out["origin"].startswith("git:routes/routes.yaml:1@")
    assert "spec.backends[0]: Service shop/svc-a is in another namespace" in left_out["detail"]
    checked = validate(str(stack.repo.root / "routes"))
    assert checked.returncode == 0 and "warning: file:routes.yaml:1: evil/steal: not served unless a ReferenceGrant" in checked.stderr, checked.stderr

    stack.commit_routes({"grants.yaml": [GRANT]}, "grant evil the orders Service")
    stack.wait_upstream("/steal", "svc-a")
    assert stack.control_plane.status()["unresolved"] == []
    assert next(s for s in stack.control_plane.status()["sources"] if s["kind"] == "git")["reference_grants"] == 1
    assert "warning" not in validate(str(stack.repo.root / "routes")).stderr

    stack.repo.remove("grants.yaml")
    stack.repo.commit("revoke")
    stack.wait_status("/steal", 404)
    assert stack.get("/own").upstream == "svc-b"
