"""Issue 33, item 2, against a real API server and real Envoy: a Git source claims only the
namespaces it is bound to, so a Git route can neither pose as a cluster namespace to use
that namespace's real ReferenceGrant, nor replace its Route objects; and when a bound
repo's route does win over a Route object of the same id, both sides report it."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from tests.e2e.test_kubernetes_routes import (
    addresses,  # noqa: F401 - fixtures
    api,  # noqa: F401
    apply,
    conditions,
    endpoint_slice,
    make_stack,
    namespace,  # noqa: F401
    reference_grant,
    route,
    service,
)
from tests.harness.gateway import GatewayStack
from tests.harness.http_client import wait_for
from tests.harness.kubernetes import KubeAPIServer
from tests.harness.netns import TestNetwork
from tests.harness.route_repo import route_doc


def git_status(stack: GatewayStack) -> dict[str, Any]:
    return next(s for s in stack.control_plane.status()["sources"] if s["kind"] == "git")


def public(path: str, service_name: str, **backend: Any) -> dict[str, Any]:
    return {"auth": {"required": False}, "match": {"pathPrefix": path}, "backends": [{"service": service_name, "port": 8080, **backend}]}


def test_a_git_route_cannot_pose_as_a_namespace_to_use_its_cluster_reference_grant(
    tmp_path: Path, api: KubeAPIServer, namespace: str, addresses: list[str], test_network: TestNetwork  # noqa: F811
) -> None:
    """shop grants namespace ``evil``'s Routes its orders Service. A Route object in evil
    uses it; a Git route (repo not bound to evil) claiming evil does not."""
    evil, shop = namespace, f"shop-{uuid.uuid4().hex[:8]}"
    api.kubectl("create", "namespace", shop)
    stack = make_stack(tmp_path, api, evil, addresses, test_network)
    try:
        apply(api, service("orders", shop), endpoint_slice("orders-a", shop, "orders", stack.upstreams["svc-a"]),
              reference_grant("evil-to-orders", shop, evil, "orders"))
        to_orders = {"namespace": shop}
        commit = stack.commit_routes({"pose.yaml": [route_doc("posing", public("/posing", "orders", **to_orders), namespace=evil)]})
        stack.start()
        apply(api, route("legit", evil, public("/legit", "orders", **to_orders)))
        wait_for(lambda: stack.get("/legit").upstream == "svc-a", 15, "the Route object in evil uses the grant")
        assert stack.get("/posing").status == 404, "a Git route posing as evil used evil's grant"
        [refused] = git_status(stack)["refused"]
        assert refused.startswith(f"git:routes/pose.yaml:1@{commit[:12]}: metadata.namespace: Route {evil}/posing: namespace '{evil}'")
        assert "sources.git[0].namespaces is not set, so only [default]" in refused
    finally:
        stack.stop()


def _same_id_stack(tmp_path: Path, api: KubeAPIServer, namespace: str, addresses: list[str], network: TestNetwork, **kwargs: Any) -> GatewayStack:
    """A Route object ``shop`` served by svc-a (Service ``local``), and a Git file defining
    the same id, served by svc-b (static endpoints)."""
    stack = make_stack(tmp_path, api, namespace, addresses, network, **kwargs)
    a, b = stack.upstreams["svc-a"], stack.upstreams["svc-b"]
    apply(api, service("local", namespace), endpoint_slice("local-a", namespace, "local", a))
    stack.set_endpoints({"svc-b": [f"{b.host}:{b.port}"]})
    stack.commit_routes({"shop.yaml": [route_doc("shop", public("/shop", "svc-b"), namespace=namespace)]})
    stack.start()
    apply(api, route("shop", namespace, public("/shop", "local")))
    return stack


def test_a_git_route_not_bound_to_the_namespace_cannot_replace_a_route_object(
    tmp_path: Path, api: KubeAPIServer, namespace: str, addresses: list[str], test_network: TestNetwork  # noqa: F811
) -> None:
    """Unbound to the namespace, a Git route with a Route object's id is refused and the
    object keeps serving (Accepted=True)."""
    stack = _same_id_stack(tmp_path, api, namespace, addresses, test_network)
    try:
        wait_for(lambda: conditions(api, namespace, "shop").get("Programmed", {}).get("status") == "True", 15, "the object programmed")
        assert stack.get("/shop").upstream == "svc-a", "the Git route replaced the Route object"
        assert conditions(api, namespace, "shop")["Accepted"]["status"] == "True"
        git = git_status(stack)
        assert git["replaces"] is None
        [refused] = git["refused"]
        assert f"Route {namespace}/shop: namespace '{namespace}' is not one this file may claim" in refused
        assert stack.control_plane.status()["conflicts"] == []
    finally:
        stack.stop()


def test_a_bound_git_route_replacing_a_route_object_is_reported_on_both(
    tmp_path: Path, api: KubeAPIServer, namespace: str, addresses: list[str], test_network: TestNetwork  # noqa: F811
) -> None:
    """Bound to the namespace, the Git route (reviewed config of the namespace's owner)
    wins the same id, and neither side is silent: the object's Accepted=False/Conflict
    names the Git file; the Git source lists the object under ``replaces`` in /status
    and logs ``git_route_replaces``."""
    stack = _same_id_stack(tmp_path, api, namespace, addresses, test_network, git_namespaces=[namespace])
    try:
        wait_for(lambda: conditions(api, namespace, "shop").get("Accepted", {}).get("reason") == "Conflict", 15, "Accepted=False, Conflict")
        accepted = conditions(api, namespace, "shop")["Accepted"]
        assert accepted["status"] == "False"
        assert f"{namespace}/shop is also defined by git:routes/shop.yaml:1@" in accepted["message"]
        assert "which wins (git over kubernetes); this one is not served" in accepted["message"]
        assert stack.get("/shop").upstream == "svc-b"
        [replaced] = git_status(stack)["replaces"]
        assert replaced["route"] == replaced["replaces"] == f"{namespace}/shop" and replaced["reason"] == "same id"
        assert replaced["replaced_origin"].startswith(f"kubernetes:{namespace}/shop")
        [conflict] = stack.control_plane.status()["conflicts"]
        assert conflict["winner"].startswith("git:routes/shop.yaml:1@")
        assert "git_route_replaces" in stack.control_plane.log_tail(400)
        checked = subprocess.run(
            [sys.executable, "-m", "gatehouse", "validate", "--config", str(stack.control_plane.config_path), str(stack.repo.root / "routes")],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert checked.returncode == 0, checked.stderr
        assert f"warning: namespace {namespace}: sources.kubernetes watches it too; a Route object there with the same id" in checked.stderr
    finally:
        stack.stop()
