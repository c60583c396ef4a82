"""Issue 33, item 2: a Git source claims only the namespaces it is bound to.

Through a real Envoy and a real Git repository: a document claiming a namespace its file
may not claim is refused (file, line, field, reason in /status, the log, `gatehouse
validate` and `gatehouse render`) while the rest of the commit serves; a ReferenceGrant
for a namespace the source does not own opens nothing; a route cannot pose as another
namespace to mint token-swap tokens for that namespace's audience. With no
``namespaces`` a source may claim only ``default``. (The Kubernetes side, cluster grants
and same-id Routes, is tests/e2e/test_git_namespace_binding_kubernetes.py.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.harness.ext_authz import ExtAuthzProcess
from tests.harness.gateway import GatewayStack
from tests.harness.http_client import wait_for
from tests.harness.issuer import TestIssuer
from tests.harness.route_repo import route_doc
from tests.integration.conftest import StackFactory, ext_authz_entry

PUBLIC = {"auth": {"required": False}}


def public(path: str, service: str, **backend: Any) -> dict[str, Any]:
    return {**PUBLIC, "match": {"pathPrefix": path}, "backends": [{"service": service, "port": 8080, **backend}]}


def git_status(stack: GatewayStack) -> dict[str, Any]:
    return next(s for s in stack.control_plane.status()["sources"] if s["kind"] == "git")


def bind(stack: GatewayStack, **fields: Any) -> None:
    """Set the Git source's binding in the control plane's config (before ``start``)."""
    path = stack.control_plane.config_path
    config = yaml.safe_load(path.read_text())
    config["sources"]["git"][0].update(fields)
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def gatehouse(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gatehouse", *args], capture_output=True, text=True, timeout=60)


def test_without_a_list_a_git_route_claiming_another_namespace_is_refused_while_the_rest_serves(make_stack: StackFactory) -> None:
    """The default for a config with no list: only ``default``; the refusal names the
    file, line, field and the setting to change, and the commit is served otherwise."""
    stack = make_stack(upstreams=("svc-a", "svc-b"))
    commit = stack.commit_routes({
        "orders.yaml": [route_doc("orders", public("/orders", "svc-a"))],
        "ledger.yaml": [route_doc("own", public("/own", "svc-a")), route_doc("ledger", public("/ledger", "svc-b"), namespace="payments")],
    })  # fmt: skip
    stack.start(wait_path="/orders")
    assert stack.get("/own").upstream == "svc-a", "the same file's other route serves"
    assert stack.get("/ledger").status == 404, "a route claiming payments was served"
    status = git_status(stack)
    assert status["serving"] == commit and status["rejected"] is None, "the commit is applied, not rejected"
    assert status["refused"] == [
        f"git:routes/ledger.yaml:15@{commit[:12]}: metadata.namespace: Route payments/ledger: namespace 'payments' is not one "
        "this file may claim (sources.git[0].namespaces is not set, so only [default]); the route is not served"
    ]
    log = stack.control_plane.log_tail(400)
    assert "git_source_unbound" in log and "sources.git[0].namespaces is not set" in log
    assert "git_documents_refused" in log

    # Binding the namespace is the fix the message points at; nothing else changes.
    stack.commit_routes({"ledger.yaml": [route_doc("own", public("/own", "svc-a"))], "orders.yaml": [route_doc("orders", public("/orders", "svc-b"))]})
    stack.wait_upstream("/orders", "svc-b")
    assert git_status(stack)["refused"] is None


def test_a_git_route_outside_its_bound_namespaces_is_refused_and_validate_and_render_agree(make_stack: StackFactory) -> None:
    """``namespaces`` for the repo, ``namespacesByPath`` for one team's directory (the longest
    match decides, in place of the repo's list)."""
    stack = make_stack(upstreams=("svc-a", "svc-b"), git_namespaces=["shop"])
    bind(stack, namespacesByPath={"teams/payments": ["payments"]})
    commit = stack.commit_routes({
        "shop.yaml": [route_doc("orders", public("/orders", "svc-a"), namespace="shop"),
                      route_doc("ledger", public("/ledger", "svc-b"), namespace="payments")],
        "teams/payments/ledger.yaml": [route_doc("pay", public("/pay", "svc-b"), namespace="payments"),
                                       route_doc("cart", public("/cart", "svc-a"), namespace="shop")],
    })  # fmt: skip
    stack.start(wait_path="/orders")
    assert stack.get("/pay").upstream == "svc-b", "the payments directory may claim payments"
    assert [stack.get(p).status for p in ("/ledger", "/cart")] == [404, 404]
    refused = git_status(stack)["refused"]
    assert refused == [
        f"git:routes/shop.yaml:15@{commit[:12]}: metadata.namespace: Route payments/ledger: namespace 'payments' is not one this "
        "file may claim (sources.git[0].namespaces: [shop]); the route is not served",
        f"git:routes/teams/payments/ledger.yaml:15@{commit[:12]}: metadata.namespace: Route shop/cart: namespace 'shop' is not one "
        "this file may claim (sources.git[0].namespacesByPath['teams/payments']: [payments]); the route is not served",
    ]

    tree, config = str(stack.repo.root / "routes"), str(stack.control_plane.config_path)
    checked = gatehouse("validate", "--config", config, tree)
    assert checked.returncode == 1, checked.stderr
    assert "error: file:shop.yaml:15: metadata.namespace: Route payments/ledger: namespace 'payments' is not one" in checked.stderr
    assert "error: file:teams/payments/ledger.yaml:15: metadata.namespace: Route shop/cart:" in checked.stderr
    assert gatehouse("validate", tree).returncode == 0, "without --config namespaces are not judged"
    rendered = gatehouse("render", "--config", config, tree)
    assert rendered.returncode == 0, rendered.stderr
    assert "refused: file:shop.yaml:15: metadata.namespace: Route payments/ledger" in rendered.stderr
    served = [r["name"] for r in yaml.safe_load(rendered.stdout)["RDS"][0]["virtual_hosts"][0]["routes"]]
    assert sorted(served) == ["payments/pay", "shop/orders"]
    wrong = gatehouse("validate", "--config", config, "--source", "other", tree)
    assert wrong.returncode == 2 and "--source: 'other' is not a Git source of the config (routes)" in wrong.stderr


GRANT = {
    "apiVersion": "gateway.networking.k8s.io/v1beta1",
    "kind": "ReferenceGrant",
    "metadata": {"name": "open-orders", "namespace": "shop"},
    "spec": {"from": [{"group": "gatehouse.io", "kind": "Route", "namespace": "default"}], "to": [{"group": "", "kind": "Service", "name": "svc-a"}]},
}


def test_a_git_reference_grant_for_a_namespace_the_source_does_not_own_counts_for_nothing(make_stack: StackFactory) -> None:
    """The repo writes a grant "in" shop opening shop/svc-a to its own routes: refused, so
    the route naming shop/svc-a stays unresolved (404), and the rest serves."""
    stack = make_stack(upstreams=("svc-a", "svc-b"))
    commit = stack.commit_routes({
        "steal.yaml": [route_doc("steal", public("/steal", "svc-a", namespace="shop")), route_doc("own", public("/own", "svc-b"))],
        "grant.yaml": [GRANT],
    })  # fmt: skip
    stack.start(wait_path="/own")
    assert stack.get("/steal").status == 404, "a grant the repo wrote for shop opened shop"
    status = stack.control_plane.status()
    assert [u["route"] for u in status["unresolved"]] == ["default/steal"]
    git = git_status(stack)
    assert git["reference_grants"] == 0
    assert git["refused"] == [
        f"git:routes/grant.yaml:1@{commit[:12]}: metadata.namespace: ReferenceGrant shop/open-orders: namespace 'shop' is not "
        "one this file may claim (sources.git[0].namespaces is not set, so only [default]); it opens nothing"
    ]


def test_a_git_reference_grant_in_a_bound_namespace_still_counts(make_stack: StackFactory) -> None:
    """What must not change: a repo bound to shop may open shop's Services to its routes."""
    stack = make_stack(upstreams=("svc-a", "svc-b"), git_namespaces=["default", "shop"])
    stack.commit_routes({"steal.yaml": [route_doc("steal", public("/steal", "svc-a", namespace="shop"))], "grant.yaml": [GRANT]})
    stack.start(wait_path="/steal")
    assert stack.get("/steal").upstream == "svc-a"
    git = git_status(stack)
    assert git["reference_grants"] == 1 and git["refused"] is None


def test_a_git_route_cannot_pose_as_a_namespace_to_mint_its_swap_tokens(make_stack: StackFactory, tmp_path: Path) -> None:
    """ext_authz lets routes in namespace billing ask for tokens for audience legacy-billing.
    A route in a repo not bound to billing, claiming billing, is refused before it reaches
    Envoy (404, no token minted); the repo's own route asking for it is still refused by
    ext_authz (503), and its other routes keep serving."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    issuer = TestIssuer()
    (tmp_path / "authz").mkdir(parents=True)
    key = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "authz" / "signing.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    authz = ExtAuthzProcess(
        tmp_path / "authz",
        {"issuers": [{"issuer": issuer.issuer, "audiences": [issuer.audience], "jwksFile": str(issuer.write_jwks(tmp_path / "jwks.json")),
                      "requiredClaims": ["exp"]}]},
        transport="http",
    )
    authz.config["http"]["upstreamTokens"] = {"issuer": "https://gateway.internal/", "keyFile": "signing.pem",
                                              "audiences": {"billing": ["legacy-billing"]}}
    stack = make_stack(upstreams=("svc-a",), control_plane_extra={"extAuthz": ext_authz_entry([authz])})
    backend = [{"service": "svc-a", "port": 8080}]
    swap = {"upstreamToken": {"audience": "legacy-billing"}}
    commit = stack.commit_routes({"r.yaml": [
        route_doc("grab", {"match": {"pathPrefix": "/grab"}, "backends": backend, "auth": swap}, namespace="billing"),
        route_doc("mine", {"match": {"pathPrefix": "/mine"}, "backends": backend, "auth": swap}),
        route_doc("orders", {"match": {"pathPrefix": "/orders"}, "backends": backend}),
    ]})
    try:
        stack.start()
        authz.use_control_plane(stack.control_plane.xds_port)
        authz.start()
        token = {"authorization": f"Bearer {issuer.token('alice')}"}
        wait_for(lambda: stack.get("/orders/1", headers=token).status == 200, 20, "the repo's plain route served")
        grabbed = stack.get("/grab/1", headers=token)
        assert grabbed.status == 404, ("a route posing as billing was served", grabbed.status, grabbed.body[:300])
        mine = stack.get("/mine/1", headers=token)
        assert mine.status == 503 and mine.json()["error"]["code"] == "authorization_unavailable", mine.body
        [refused] = git_status(stack)["refused"]
        assert refused.startswith(f"git:routes/r.yaml:1@{commit[:12]}: metadata.namespace: Route billing/grab: namespace 'billing'")
        code, body = stack.control_plane._request("/status/routes")
        assert code == 200 and "billing/grab" not in {row["route"] for row in json.loads(body)["routes"]}
    finally:
        authz.stop()
