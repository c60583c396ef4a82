"""ext_authz for real: the translator's ext_authz wiring through `envoy --mode validate`, and
the `gatehouse ext-authz` process answering Check over gRPC, with /readyz telling the truth
(keys loaded and revocation mirror synced) and a bad config refused with exit code 2."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from envoy.service.auth.v3 import attribute_context_pb2, external_auth_pb2, external_auth_pb2_grpc
from google.rpc import code_pb2

from control_plane.model import Origin, parse_route_file
from control_plane.render import resource_data
from control_plane.sources.static_endpoints import StaticEndpointTable
from control_plane.translator import EndpointTranslator, GatewaySettings, RouteTranslator
from control_plane.translator.ext_authz import EXT_AUTHZ_CLUSTER, EXT_AUTHZ_FILTER, ExtAuthzSettings
from tests.harness.envoy import envoy_binary, validate_config, write_bootstrap
from tests.harness.ext_authz import REPO_ROOT, ExtAuthzProcess
from tests.harness.issuer import TestIssuer
from ext_authz.tokens.principal import token_principal
from tests.harness.ports import free_port
from tests.harness.processes import ManagedProcess
from tests.harness.redis import RedisServer

AttributeContext = attribute_context_pb2.AttributeContext
PLACEHOLDER_ENDPOINT = {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 1}}}}

ROUTES_YAML = """
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: orders, namespace: shop}
spec:
  match: {pathPrefix: /orders}
  backends: [{service: orders, port: 8080}]
  retries: {attempts: 2}
  auth: {audiences: [api], scopes: ["orders:read"], roles: [clerk, admin]}
---
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: public, namespace: shop}
spec:
  match: {pathPrefix: /public}
  backends: [{service: web, port: 8080}]
  auth: {required: false}
---
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: plain, namespace: shop}
spec:
  hosts: [api.example.com]
  match: {path: "/items/{id}"}
  backends: [{service: web, port: 8080}]
"""


# --- envoy --mode validate ----------------------------------------------------------------------


def static_bootstrap(settings: GatewaySettings) -> dict[str, Any]:
    """The translation as one static bootstrap: RDS inlined (validate_clusters on), EDS clusters
    made STATIC with a placeholder endpoint, Gatehouse's own service clusters kept as they are."""
    routes, problems = parse_route_file(ROUTES_YAML, Origin("file", "routes.yaml"))
    assert problems == [], [str(p) for p in problems]
    translation = RouteTranslator(settings).translate(routes)
    endpoints = EndpointTranslator().translate(translation.cluster_refs, StaticEndpointTable({}))
    [listener] = [copy.deepcopy(resource_data(r)) for r in translation.listeners]
    [route_config] = [resource_data(r) for r in translation.routes]
    route_config["validate_clusters"] = True
    hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
    assert hcm["rds"]["route_config_name"] == route_config["name"]
    del hcm["rds"]
    hcm["route_config"] = route_config
    by_cluster = {a["cluster_name"]: a for a in (resource_data(r) for r in endpoints)}
    static_clusters = []
    for data in (resource_data(r) for r in translation.clusters):
        if data.get("type") == "EDS" or "eds_cluster_config" in data:
            data.pop("type", None)
            data.pop("eds_cluster_config")
            assignment = by_cluster.pop(data["name"])
            if not assignment.get("endpoints"):
                assignment["endpoints"] = [{"lb_endpoints": [PLACEHOLDER_ENDPOINT]}]
            data = {**data, "type": "STATIC", "load_assignment": assignment}
        static_clusters.append(data)
    assert by_cluster == {}
    return {"static_resources": {"listeners": [listener], "clusters": static_clusters}}


def envoy_verdict(bootstrap: dict[str, Any], path: Path) -> tuple[int, str]:
    write_bootstrap(bootstrap, path)
    result = validate_config(envoy_binary(), path)
    return result.returncode, (result.stdout + result.stderr).strip()


def hcm_of(bootstrap: dict[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = bootstrap["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    return config


SETTINGS = {
    "one-instance": GatewaySettings(ext_authz=ExtAuthzSettings((("127.0.0.1", 9191),))),
    "three-instances-fail-open": GatewaySettings(
        ext_authz=ExtAuthzSettings((("127.0.0.1", 9191), ("127.0.0.2", 9191), ("localhost", 9292)), 1000, True)
    ),
    "no-ext-authz": GatewaySettings(),
}


@pytest.mark.envoy
@pytest.mark.parametrize("name", list(SETTINGS))
def test_the_ext_authz_wiring_passes_envoy_validate(name: str, tmp_path: Path) -> None:
    settings = SETTINGS[name]
    bootstrap = static_bootstrap(settings)
    names = [f["name"] for f in hcm_of(bootstrap)["http_filters"]]
    cluster_names = {c["name"] for c in bootstrap["static_resources"]["clusters"]}
    if settings.ext_authz is not None:
        assert EXT_AUTHZ_FILTER in names and EXT_AUTHZ_CLUSTER in cluster_names
        # Validate mode does not resolve envoy_grpc cluster names (a missing one still says OK),
        # so the reference is checked here.
        ext_authz = next(f for f in hcm_of(bootstrap)["http_filters"] if f["name"] == EXT_AUTHZ_FILTER)
        assert ext_authz["typed_config"]["grpc_service"]["envoy_grpc"]["cluster_name"] in cluster_names
    else:
        assert EXT_AUTHZ_FILTER not in names and EXT_AUTHZ_CLUSTER not in cluster_names
    code, output = envoy_verdict(bootstrap, tmp_path / f"{name}.yaml")
    assert code == 0 and "OK" in output, f"envoy --mode validate refused the {name} config:\n{output}"


@pytest.mark.envoy
def test_envoy_validate_checks_the_ext_authz_parts(tmp_path: Path) -> None:
    """The check is real: the same bootstrap with a broken ext_authz piece is refused."""
    base = static_bootstrap(SETTINGS["one-instance"])

    typo = copy.deepcopy(base)
    ext_authz = next(f for f in hcm_of(typo)["http_filters"] if f["name"] == EXT_AUTHZ_FILTER)
    ext_authz["typed_config"]["status_on_error"] = {"code": "NoSuchStatus"}
    code, output = envoy_verdict(typo, tmp_path / "typo.yaml")
    assert code != 0 and "NoSuchStatus" in output, output

    bad_per_route = copy.deepcopy(base)
    entry = next(
        r for vh in hcm_of(bad_per_route)["route_config"]["virtual_hosts"] for r in vh["routes"] if r["name"] == "shop/public"
    )
    # The per-route message under the filter's own type: Envoy refuses the mismatch.
    entry["typed_per_filter_config"][EXT_AUTHZ_FILTER] = {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz",
        "failure_mode_allow": True,
    }
    code, output = envoy_verdict(bad_per_route, tmp_path / "per-route.yaml")
    assert code != 0, output



# --- the real process ---------------------------------------------------------------------------


def check_request(authorization: str | None, request_id: str = "req-1", **extensions: str) -> external_auth_pb2.CheckRequest:
    headers = {"x-request-id": request_id}
    if authorization is not None:
        headers["authorization"] = authorization
    return external_auth_pb2.CheckRequest(
        attributes=AttributeContext(
            request=AttributeContext.Request(http=AttributeContext.HttpRequest(method="GET", path="/orders", headers=headers)),
            context_extensions=extensions,
        )
    )


def readyz(service: ExtAuthzProcess) -> tuple[int, str] | None:
    """(status, body) of /readyz, or None while nothing listens."""
    url = f"http://127.0.0.1:{service.metrics_port}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return None


def launch(service: ExtAuthzProcess) -> ManagedProcess:
    """Start the process without waiting for readiness; return once /readyz answers at all."""
    argv = [sys.executable, "-m", "gatehouse", "ext-authz", "--config", str(service.config_path), "--log-level", "debug"]
    service.process = ManagedProcess.start(argv, name=service.name, log_dir=service.directory, cwd=REPO_ROOT)
    service.process.wait_until(lambda: readyz(service) is not None, 30, "/readyz answering")
    return service.process


def wait_until(predicate: Any, timeout: float, what: str) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"no {what} after {timeout}s")
        time.sleep(0.05)
    return time.monotonic() - started


def issuer_entry(issuer: TestIssuer, jwks_file: Path) -> dict[str, Any]:
    return {"issuer": issuer.issuer, "audiences": [issuer.audience], "jwksFile": str(jwks_file), "requireJti": True}


@pytest.fixture
def services() -> Iterator[list[ExtAuthzProcess]]:
    started: list[ExtAuthzProcess] = []
    yield started
    for service in started:
        service.stop()


@pytest.mark.redis
def test_check_over_real_grpc(tmp_path: Path, redis: RedisServer, services: list[ExtAuthzProcess]) -> None:
    issuer = TestIssuer()
    config = {
        "issuers": [issuer_entry(issuer, issuer.write_jwks(tmp_path / "jwks.json"))],
        "revocation": {"redisUrl": redis.url},
    }
    service = ExtAuthzProcess(tmp_path / "authz", config)
    services.append(service)
    service.start()
    with grpc.insecure_channel(service.address) as channel:
        stub = external_auth_pb2_grpc.AuthorizationStub(channel)

        def check(authorization: str | None, **extensions: str) -> external_auth_pb2.CheckResponse:
            response: external_auth_pb2.CheckResponse = stub.Check(check_request(authorization, **extensions), timeout=10)
            return response

        token = issuer.token("alice", scope="orders:read orders:write", role="clerk")
        ok = check(f"Bearer {token}", route="shop/orders", scopes="orders:read", roles="clerk admin", audiences="api")
        assert ok.status.code == code_pb2.OK
        assert {h.header.key: h.header.value for h in ok.ok_response.headers} == {
            "x-user-id": "alice", "x-user-role": "clerk", "x-scope": "orders:read orders:write",
            "x-principal": token_principal(issuer.issuer, "alice"),  # the id with its source (issue 33)
        }

        missing = check(None)
        assert missing.status.code == code_pb2.UNAUTHENTICATED
        assert missing.denied_response.status.code == 401
        body = json.loads(missing.denied_response.body)["error"]
        assert (body["code"], body["reason"], body["request_id"]) == ("invalid_token", "missing", "req-1")

        forged = TestIssuer(issuer.issuer).token("alice", kid=None)  # right iss, unknown key
        assert check(f"Bearer {forged}").denied_response.status.code == 401

        forbidden = check(f"Bearer {issuer.token('bob', scope='catalog:read')}", scopes="orders:read")
        assert forbidden.status.code == code_pb2.PERMISSION_DENIED
        assert forbidden.denied_response.status.code == 403
        headers = {h.header.key: h.header.value for h in forbidden.denied_response.headers}
        assert 'error="insufficient_scope"' in headers["www-authenticate"]
        assert json.loads(forbidden.denied_response.body)["error"]["reason"] == "scope"

        # A blocked subject, through the admin CLI and Redis, is 403 blocked.
        result = subprocess.run(
            [sys.executable, "-m", "gatehouse", "block", "--sub", "carol", "--admin", f"127.0.0.1:{service.admin_port}"],
            env=service.admin_env(), capture_output=True, text=True, timeout=30, cwd=REPO_ROOT,
        )
        assert result.returncode == 0, result.stderr
        blocked = check(f"Bearer {issuer.token('carol')}")
        assert blocked.denied_response.status.code == 403
        assert json.loads(blocked.denied_response.body)["error"]["reason"] == "blocked"

    metrics = service.metrics_text()
    assert 'gatehouse_authz_decisions_total{reason="ok",result="allow"} 1.0' in metrics
    assert 'gatehouse_authz_decisions_total{reason="missing",result="deny"} 1.0' in metrics
    assert 'gatehouse_authz_decisions_total{reason="blocked",result="deny"} 1.0' in metrics


def test_readyz_waits_for_keys(tmp_path: Path, services: list[ExtAuthzProcess]) -> None:
    issuer = TestIssuer()
    jwks_file = tmp_path / "later" / "jwks.json"
    service = ExtAuthzProcess(tmp_path / "authz", {"issuers": [issuer_entry(issuer, jwks_file)]})
    services.append(service)
    launch(service)
    status, body = readyz(service) or (0, "")
    assert status == 503 and "no usable keys" in body and issuer.issuer in body, (status, body)
    time.sleep(1.5)  # it stays unready while the file is missing
    assert readyz(service) == (503, body)
    with grpc.insecure_channel(service.address) as channel:
        stub = external_auth_pb2_grpc.AuthorizationStub(channel)
        early = stub.Check(check_request(f"Bearer {issuer.token('alice')}"), timeout=10)
        assert early.denied_response.status.code == 503, "no keys: a deliberate 503, not a 401"
        assert json.loads(early.denied_response.body)["error"]["reason"] == "no_keys"

        jwks_file.parent.mkdir()
        issuer.write_jwks(jwks_file)
        took = wait_until(lambda: readyz(service) == (200, "ready\n"), 10, "/readyz 200 after the JWKS file appeared")
        assert took < 8, f"ready {took:.1f}s after the key file appeared"
        late = stub.Check(check_request(f"Bearer {issuer.token('alice')}"), timeout=10)
        assert late.status.code == code_pb2.OK


@pytest.mark.redis
def test_readyz_waits_for_the_revocation_mirror(tmp_path: Path, services: list[ExtAuthzProcess]) -> None:
    issuer = TestIssuer()
    redis_port = free_port()
    config = {
        "issuers": [issuer_entry(issuer, issuer.write_jwks(tmp_path / "jwks.json"))],
        "revocation": {"redisUrl": f"redis://127.0.0.1:{redis_port}/0", "timeout": "200ms"},
    }
    service = ExtAuthzProcess(tmp_path / "authz", config)
    services.append(service)
    launch(service)
    wait_until(lambda: readyz(service) == (503, "revocation mirror not synced\n"), 10, "keys loaded, mirror not synced")
    time.sleep(1.0)
    assert readyz(service) == (503, "revocation mirror not synced\n")
    with grpc.insecure_channel(service.address) as channel:
        stub = external_auth_pb2_grpc.AuthorizationStub(channel)
        early = stub.Check(check_request(f"Bearer {issuer.token('alice')}"), timeout=10)
        assert early.denied_response.status.code == 503, "closed policy before the first sync"
        assert json.loads(early.denied_response.body)["error"]["reason"] == "revocation_unavailable"

        redis = RedisServer.start(log_dir=tmp_path / "redis", port=redis_port)
        try:
            took = wait_until(lambda: readyz(service) == (200, "ready\n"), 10, "/readyz 200 after Redis came up")
            assert took < 8
            assert stub.Check(check_request(f"Bearer {issuer.token('alice')}"), timeout=10).status.code == code_pb2.OK
        finally:
            service.stop()
            redis.stop()


BAD_CONFIGS = {
    "leeway": (
        {"issuers": [{"issuer": "https://i/", "jwksFile": "k.json", "leeway": "banana"}]},
        "issuers[0].leeway",
    ),
    "policy": (
        {"issuers": [{"issuer": "https://i/", "jwksFile": "k.json"}], "revocation": {"redisUrl": "redis://x", "onUnavailable": "maybe"}},
        "revocation.onUnavailable",
    ),
    "typo": ({"issuers": [{"issuer": "https://i/", "jwksFile": "k.json"}], "tokenCacheSise": 5}, "tokenCacheSise"),
    "no-issuers": ({"issuers": []}, "issuers"),
    "key-source": ({"issuers": [{"issuer": "https://i/"}]}, "issuers[0]"),
    "algorithm": ({"issuers": [{"issuer": "https://i/", "jwksFile": "k.json", "algorithms": ["HS256"]}]}, "issuers[0].algorithms[0]"),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_a_bad_config_exits_2_naming_the_field(tmp_path: Path, case: str) -> None:
    data, field = BAD_CONFIGS[case]
    path = tmp_path / "ext-authz.yaml"
    path.write_text(yaml.safe_dump(data))
    result = subprocess.run(
        [sys.executable, "-m", "gatehouse", "ext-authz", "--config", str(path)],
        capture_output=True, text=True, timeout=60, cwd=REPO_ROOT,
    )
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert f"{path}: {field}:" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_a_missing_config_file_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    result = subprocess.run(
        [sys.executable, "-m", "gatehouse", "ext-authz", "--config", str(path)],
        capture_output=True, text=True, timeout=60, cwd=REPO_ROOT,
    )
    assert result.returncode == 2
    assert f"{path}: cannot read" in result.stderr
