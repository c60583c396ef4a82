"""API keys as Kubernetes Secrets, on a real API server: ``kubectl apply`` the Secret that
``gatehouse apikey create --secret`` writes (the key's hash only), and the key works
through real Envoy and ext_authz; delete the Secret, and it is refused within a second.
A malformed Secret is skipped (logged by name and field) while the others keep working,
and keys made with the CLI are never removed by the sync. The Route CRD stores key routes
and its CEL refuses bad consumer lists."""

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

from tests.harness.ext_authz import ExtAuthzProcess
from tests.harness.gateway import GatewayStack
from tests.harness.http_client import wait_for
from tests.harness.issuer import TestIssuer
from tests.harness.kubernetes import KubeAPIServer
from tests.harness.redis import RedisServer
from tests.harness.route_repo import route_doc

ROUTES = [
    route_doc(
        "partners",
        {"match": {"pathPrefix": "/partners"}, "backends": [{"service": "svc-a", "port": 8080}], "auth": {"apiKeys": True, "jwt": False}},
    ),
    route_doc("public", {"match": {"pathPrefix": "/public"}, "backends": [{"service": "svc-a", "port": 8080}], "auth": {"required": False}}),
]



@pytest.fixture
def namespace(api: KubeAPIServer) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    api.kubectl("create", "namespace", name)
    return name


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer.start(log_dir=tmp_path / "redis")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def stack(tmp_path: Path, api: KubeAPIServer, namespace: str, redis: RedisServer) -> Iterator[GatewayStack]:
    issuer = TestIssuer()
    config: dict[str, Any] = {
        "issuers": [{"issuer": issuer.issuer, "audiences": [issuer.audience], "jwksFile": str(issuer.write_jwks(tmp_path / "jwks.json"))}],
        "revocation": {"redisUrl": redis.url, "resyncInterval": "2s"},
    }
    authz = ExtAuthzProcess(tmp_path / "authz", config, transport="http")
    kubernetes = {
        "kubeconfig": str(api.kubeconfig), "namespaces": [namespace], "leaseNamespace": namespace,
        "apiKeys": {"redisUrl": redis.url},  # the Secrets in the Lease's namespace
    }
    gateway = GatewayStack(tmp_path / "stack", kubernetes=kubernetes, control_plane_extra={"extAuthz": {"address": [authz.check_address]}})
    gateway.commit_routes({"routes.yaml": ROUTES})
    try:
        gateway.start(wait_path="/public")
        authz.use_control_plane(gateway.control_plane.xds_port)
        authz.start()
        yield gateway
    finally:
        authz.stop()
        gateway.stop()


def create_secret(tmp_path: Path, consumer: str, namespace: str) -> tuple[str, dict[str, Any]]:
    """(key, Secret manifest) from the CLI."""
    path = tmp_path / f"{consumer}.json"
    result = subprocess.run(
        [sys.executable, "-m", "gatehouse", "apikey", "create", "--consumer", consumer, "--secret", str(path), "--namespace", namespace],
        capture_output=True, text=True, timeout=30,
    )
    assert result.returncode == 0, result.stderr
    key = result.stdout.strip()
    manifest = json.loads(path.read_text())
    assert key not in path.read_text() and key.rsplit("_", 1)[1] not in path.read_text(), "the Secret holds the hash only"
    return key, manifest


def apply(api: KubeAPIServer, *docs: dict[str, Any]) -> None:
    """As JSON, which kubectl reads as written: PyYAML writes a key id such as 39871e09
    unquoted (a string in YAML 1.1), and kubectl's YAML reads it as a number."""
    api.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(docs)}))


def test_a_secret_applied_is_a_key_and_deleting_it_refuses_the_key_within_a_second(
    tmp_path: Path, api: KubeAPIServer, namespace: str, stack: GatewayStack, redis: RedisServer
) -> None:
    key, manifest = create_secret(tmp_path, "partner-a", namespace)
    client = stack.client()
    assert client.request("/partners/x", headers={"x-api-key": key}).status == 401

    applied = time.monotonic()
    apply(api, manifest)
    took = wait_for(lambda: client.request("/partners/x", headers={"x-api-key": key}).status == 200, 10, "the Secret's key accepted", interval=0.01)
    print(f"\nSecret applied → key accepted: {(time.monotonic() - applied) * 1000:.0f} ms")
    reply = client.request("/partners/x", headers={"x-api-key": key})
    assert (reply.json()["headers"]["x-consumer"], reply.json()["headers"]["x-user-id"]) == ("partner-a", "partner-a")
    assert took < 2.0, "the Secret watch, not the periodic resync, brought the key"

    # A CLI key beside it, and a malformed Secret: the sync leaves the one, skips the other.
    made = subprocess.run(
        [sys.executable, "-m", "gatehouse", "apikey", "create", "--consumer", "partner-b", "--redis-url", redis.url],
        capture_output=True, text=True, timeout=30,
    )
    assert made.returncode == 0, made.stderr
    cli_key = made.stdout.strip()
    broken = {**manifest, "metadata": {**manifest["metadata"], "name": "apikey-broken"}, "stringData": {"consumer": "x", "keyId": "nothex!!", "sha256": "0"}}
    apply(api, broken)
    wait_for(lambda: "apikey-broken" in (tmp_path / "stack" / "control-plane.log").read_text(), 10, "the bad Secret logged")
    log_text = (tmp_path / "stack" / "control-plane.log").read_text()
    assert "data.keyId: 8 lowercase hex digits" in log_text and "nothex!!" not in log_text

    api.kubectl("delete", "secret", manifest["metadata"]["name"], "-n", namespace)
    deleted = time.monotonic()
    took = wait_for(lambda: client.request("/partners/x", headers={"x-api-key": key}).status == 401, 5, "the deleted Secret's key refused", interval=0.01)
    print(f"Secret deleted → key refused: {(time.monotonic() - deleted) * 1000:.0f} ms")
    assert took < 1.0, f"deleting the Secret took {took:.2f}s to refuse its key"
    assert client.request("/partners/x", headers={"x-api-key": cli_key}).status == 200, "a CLI key is not the sync's to remove"
    for path in tmp_path.rglob("*.log"):
        text = path.read_text(errors="replace")
        assert key not in text and cli_key not in text, f"a key in {path}"


def test_the_crd_takes_api_key_routes_and_its_cel_refuses_empty_consumer_lists(api: KubeAPIServer, namespace: str) -> None:
    """The CRD generated from the schema: a Route with apiKeys and consumers is stored; an
    empty consumers block and a bad consumer name are refused by the API server itself."""
    def route(name: str, auth: dict[str, Any]) -> dict[str, Any]:
        spec = {"match": {"pathPrefix": f"/{name}"}, "backends": [{"service": "svc-a", "port": 8080}], "auth": auth}
        return {"apiVersion": "gatehouse.io/v1alpha1", "kind": "Route", "metadata": {"name": name, "namespace": namespace}, "spec": spec}

    apply(api, route("partners", {"apiKeys": True, "jwt": False, "consumers": {"allow": ["partner-a"]}}))
    stored = json.loads(api.kubectl("get", "route", "partners", "-n", namespace, "-o", "json").stdout)
    assert stored["spec"]["auth"] == {"apiKeys": True, "jwt": False, "consumers": {"allow": ["partner-a"]}}
    for name, auth, message in [
        ("empty", {"apiKeys": True, "consumers": {}}, "list consumers in allow or deny"),
        ("capitals", {"apiKeys": True, "consumers": {"deny": ["Partner-A"]}}, "spec.auth.consumers.deny[0]"),
    ]:
        result = api.kubectl("apply", "-f", "-", input=yaml.safe_dump(route(name, auth)), check=False)
        assert result.returncode != 0 and message in result.stderr, result.stderr
