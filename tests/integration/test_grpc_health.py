"""grpc.health.v1 and server reflection on every Gatehouse gRPC server, as real processes.

Each service's health status must say what its /readyz says: NOT_SERVING before
readiness (control plane before its first sync, ext_authz before keys and the revocation
mirror, ratelimit before its first policy table), SERVING after, NOT_SERVING again when
readiness is lost (ext_authz's keys going stale), and NOT_SERVING on SIGTERM, pushed to
a Watch stream before the server goes away. Reflection lists the hosted services.
"""

from __future__ import annotations

import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from envoy.service.accesslog.v3 import als_pb2
from envoy.service.auth.v3 import external_auth_pb2
from envoy.service.discovery.v3 import ads_pb2
from envoy.service.ratelimit.v3 import rls_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from servicekit.protos.gatehouse.admin.v1 import revocation_pb2, revocation_pb2_grpc
from tests.harness.binaries import require_binary
from tests.harness.control_plane import ControlPlaneProcess
from tests.harness.ext_authz import ExtAuthzProcess
from tests.harness.issuer import TestIssuer
from tests.harness.ports import free_port
from tests.harness.processes import ManagedProcess
from tests.harness.redis import RedisServer
from tests.harness.route_repo import RouteRepo, route_doc
from tests.harness.service import REPO_ROOT
from tests.harness.telemetry import TelemetryServiceProcess

HEALTH = "grpc.health.v1.Health"
REFLECTION = "grpc.reflection.v1alpha.ServerReflection"
# Spelled out, not imported from the code under test, so a wrong name there fails here.
ADS = "envoy.service.discovery.v3.AggregatedDiscoveryService"
AUTHORIZATION = "envoy.service.auth.v3.Authorization"
RATELIMIT = "envoy.service.ratelimit.v3.RateLimitService"
ACCESS_LOG = "envoy.service.accesslog.v3.AccessLogService"
REVOCATION_ADMIN = "gatehouse.admin.v1.RevocationAdmin"
RPC_TIMEOUT = 2.0
WATCH_TIMEOUT = 60.0
STATE_TIMEOUT = 15.0


def test_the_services_register_the_protos_names() -> None:
    """Each service registers health under the name Envoy and grpc_health_probe ask for:
    the generated descriptor's full name, spelled out above."""
    from control_plane.server import ads
    from ext_authz import runtime as ext_authz_runtime
    from ext_authz.admin import service as admin
    from ratelimit_svc import runtime as ratelimit_runtime
    from telemetry import runtime as telemetry_runtime

    registered = {
        ADS: ads.SERVICE_NAME,
        AUTHORIZATION: ext_authz_runtime.SERVICE_NAME,
        RATELIMIT: ratelimit_runtime.SERVICE_NAME,
        ACCESS_LOG: telemetry_runtime.SERVICE_NAME,
        REVOCATION_ADMIN: admin.SERVICE_NAME,
    }
    assert {spelled: name for spelled, name in registered.items() if spelled != name} == {}
    assert ads_pb2.DESCRIPTOR.services_by_name["AggregatedDiscoveryService"].full_name == ADS
    assert external_auth_pb2.DESCRIPTOR.services_by_name["Authorization"].full_name == AUTHORIZATION
    assert rls_pb2.DESCRIPTOR.services_by_name["RateLimitService"].full_name == RATELIMIT
    assert als_pb2.DESCRIPTOR.services_by_name["AccessLogService"].full_name == ACCESS_LOG
    assert revocation_pb2.DESCRIPTOR.services_by_name["RevocationAdmin"].full_name == REVOCATION_ADMIN
    assert health_pb2.DESCRIPTOR.services_by_name["Health"].full_name == HEALTH
    assert reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"].full_name == REFLECTION


# --- clients ------------------------------------------------------------------------------------


def check(address: str, service: str = "") -> str:
    """Health Check's status name, or the gRPC error code's name (UNAVAILABLE while nothing listens)."""
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=RPC_TIMEOUT
            )
        except grpc.RpcError as exc:
            return str(exc.code().name)
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


def statuses(address: str, *services: str) -> dict[str, str]:
    return {service: check(address, service) for service in ("", *services)}


def reflected_services(address: str) -> set[str]:
    with grpc.insecure_channel(address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        [reply] = list(stub.ServerReflectionInfo(iter([request]), timeout=RPC_TIMEOUT))
    assert reply.WhichOneof("message_response") == "list_services_response", reply
    return {s.name for s in reply.list_services_response.service}


class Watch:
    """One open Watch stream; ``next()`` is the next status it pushes (bounded by the stream deadline)."""

    def __init__(self, address: str, service: str = "") -> None:
        self._channel = grpc.insecure_channel(address)
        self._call = health_pb2_grpc.HealthStub(self._channel).Watch(
            health_pb2.HealthCheckRequest(service=service), timeout=WATCH_TIMEOUT
        )

    def next(self) -> str:
        reply = next(self._call)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))

    def close(self) -> None:
        self._call.cancel()
        self._channel.close()


def readyz(metrics_port: int) -> int:
    """/readyz's status code, 0 while nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/readyz", timeout=RPC_TIMEOUT) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def launch(command: str, config: Path, *, name: str, log_dir: Path, metrics_port: int) -> ManagedProcess:
    """Start a service without waiting for readiness: only until its HTTP side answers at all."""
    argv = [sys.executable, "-m", "gatehouse", command, "--config", str(config), "--log-level", "debug"]
    process = ManagedProcess.start(argv, name=name, log_dir=log_dir, cwd=REPO_ROOT)
    process.wait_until(lambda: readyz(metrics_port) != 0, 30, f"{command} /readyz answering")
    return process


def wait_health(process: ManagedProcess, address: str, status: str, *services: str) -> None:
    process.wait_until(
        lambda: set(statuses(address, *services).values()) == {status}, STATE_TIMEOUT, f"gRPC health {status}"
    )


def assert_drains_on_sigterm(process: ManagedProcess, address: str, *services: str) -> None:
    """A Watch stream sees NOT_SERVING after SIGTERM, before the server goes away; exit 0."""
    watch = Watch(address)
    try:
        assert watch.next() == "SERVING"
        assert statuses(address, *services) == dict.fromkeys(("", *services), "SERVING")
        exit_code: list[int | None] = []
        stopper = threading.Thread(target=lambda: exit_code.append(process.stop()))
        stopper.start()
        try:
            assert watch.next() == "NOT_SERVING", "the drain signal reached the watcher"
        finally:
            stopper.join(timeout=30)
        assert not stopper.is_alive()
        assert exit_code == [0], process.log_tail()
    finally:
        watch.close()


# --- fixtures -------------------------------------------------------------------------------------


@pytest.fixture
def processes() -> Iterator[list[ManagedProcess]]:
    started: list[ManagedProcess] = []
    yield started
    for process in reversed(started):
        process.stop()


def unsynced_control_plane(directory: Path, extra: dict[str, Any] | None = None) -> tuple[ControlPlaneProcess, RouteRepo]:
    """A control plane whose Git repo has no commit yet: it cannot finish its first sync."""
    require_binary("git", "apt-get install git")
    repo = RouteRepo(directory / "repo")
    endpoints = directory / "endpoints.yaml"
    directory.mkdir(parents=True, exist_ok=True)
    endpoints.write_text(yaml.safe_dump({"services": {"svc-a": ["127.0.0.1:1"]}}))
    control_plane = ControlPlaneProcess.write_config(
        directory, repo=repo.root, endpoints=endpoints, listener_port=free_port(), extra=extra
    )
    return control_plane, repo


def start_control_plane(control_plane: ControlPlaneProcess, processes: list[ManagedProcess]) -> ManagedProcess:
    process = launch(
        "control-plane", control_plane.config_path, name="control-plane",
        log_dir=control_plane.log_dir, metrics_port=control_plane.admin_port,
    )
    control_plane.process = process
    processes.append(process)
    return process


ROUTE = route_doc(
    "orders",
    {
        "match": {"pathPrefix": "/orders"},
        "backends": [{"service": "svc-a", "port": 8080}],
        "auth": {"required": False},
        "rateLimits": [{"key": "ip", "algorithm": "fixedWindow", "limit": 5, "window": "10s"}],
    },
)


# --- the services -----------------------------------------------------------------------------------


def test_control_plane_is_not_serving_before_its_first_sync(
    tmp_path: Path, processes: list[ManagedProcess], refused_address: str
) -> None:
    control_plane, repo = unsynced_control_plane(tmp_path / "cp", {"rateLimit": {"address": refused_address}})
    process = start_control_plane(control_plane, processes)
    address = f"127.0.0.1:{control_plane.xds_port}"

    assert statuses(address, ADS) == {"": "NOT_SERVING", ADS: "NOT_SERVING"}
    assert readyz(control_plane.admin_port) == 503
    watch = Watch(address)
    try:
        assert watch.next() == "NOT_SERVING"
        process.wait_until(lambda: check(address, "no.such.Service") == "NOT_FOUND", 5, "unknown service NOT_FOUND")
        assert statuses(address, ADS) == {"": "NOT_SERVING", ADS: "NOT_SERVING"}, "still unsynced, still not serving"

        repo.write("routes.yaml", [ROUTE])
        repo.commit("first routes")
        wait_health(process, address, "SERVING", ADS)
        assert readyz(control_plane.admin_port) == 200
        assert watch.next() == "SERVING", "Watch pushed the change"
    finally:
        watch.close()

    assert reflected_services(address) == {ADS, HEALTH, REFLECTION}
    assert_drains_on_sigterm(process, address, ADS)


def test_ext_authz_follows_its_keys_in_and_out(tmp_path: Path, processes: list[ManagedProcess]) -> None:
    issuer = TestIssuer()
    jwks_file = tmp_path / "later" / "jwks.json"
    # Keys read from a file are due again after 1s; maxStale 500ms makes a vanished file unready soon.
    entry = {"issuer": issuer.issuer, "audiences": [issuer.audience], "jwksFile": str(jwks_file), "jwks": {"maxStale": "500ms"}}
    service = ExtAuthzProcess(tmp_path / "authz", {"issuers": [entry]})
    process = launch("ext-authz", service.config_path, name=service.name, log_dir=service.directory,
                     metrics_port=service.metrics_port)
    service.process = process
    processes.append(process)
    address = service.address

    assert statuses(address, AUTHORIZATION) == {"": "NOT_SERVING", AUTHORIZATION: "NOT_SERVING"}
    assert readyz(service.metrics_port) == 503
    watch = Watch(address, AUTHORIZATION)
    try:
        assert watch.next() == "NOT_SERVING"

        jwks_file.parent.mkdir()
        issuer.write_jwks(jwks_file)
        wait_health(process, address, "SERVING", AUTHORIZATION)
        assert readyz(service.metrics_port) == 200
        assert watch.next() == "SERVING"

        jwks_file.unlink()  # the keys go stale: readiness is lost, and so is SERVING
        wait_health(process, address, "NOT_SERVING", AUTHORIZATION)
        assert readyz(service.metrics_port) == 503
        assert watch.next() == "NOT_SERVING"

        issuer.write_jwks(jwks_file)
        wait_health(process, address, "SERVING", AUTHORIZATION)
        assert watch.next() == "SERVING"
    finally:
        watch.close()

    assert reflected_services(address) == {AUTHORIZATION, HEALTH, REFLECTION}
    assert_drains_on_sigterm(process, address, AUTHORIZATION)


@pytest.mark.redis
def test_ext_authz_waits_for_the_revocation_mirror_while_its_admin_server_serves(
    tmp_path: Path, processes: list[ManagedProcess]
) -> None:
    issuer = TestIssuer()
    redis_port = free_port()
    entry = {"issuer": issuer.issuer, "audiences": [issuer.audience], "jwksFile": str(issuer.write_jwks(tmp_path / "jwks.json"))}
    config = {"issuers": [entry], "revocation": {"redisUrl": f"redis://127.0.0.1:{redis_port}/0", "timeout": "200ms"}}
    service = ExtAuthzProcess(tmp_path / "authz", config)
    process = launch("ext-authz", service.config_path, name=service.name, log_dir=service.directory,
                     metrics_port=service.metrics_port)
    service.process = process
    processes.append(process)
    admin = f"127.0.0.1:{service.admin_port}"

    # The admin server is up, so it serves; Authorization waits for the mirror's first sync.
    wait_health(process, admin, "SERVING", REVOCATION_ADMIN)
    assert statuses(service.address, AUTHORIZATION) == {"": "NOT_SERVING", AUTHORIZATION: "NOT_SERVING"}
    assert reflected_services(admin) == {REVOCATION_ADMIN, HEALTH, REFLECTION}
    with grpc.insecure_channel(admin) as channel:  # health and reflection open no way around the credential
        with pytest.raises(grpc.RpcError) as refused:
            revocation_pb2_grpc.RevocationAdminStub(channel).List(  # type: ignore[no-untyped-call]
                revocation_pb2.ListRequest(), timeout=RPC_TIMEOUT
            )
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED

    redis = RedisServer.start(log_dir=tmp_path / "redis", port=redis_port)
    try:
        wait_health(process, service.address, "SERVING", AUTHORIZATION)
        assert readyz(service.metrics_port) == 200
        assert_drains_on_sigterm(process, admin, REVOCATION_ADMIN)
    finally:
        process.stop()
        redis.stop()


@pytest.mark.redis
def test_ratelimit_is_not_serving_before_its_first_policy_table(
    tmp_path: Path, redis: RedisServer, processes: list[ManagedProcess]
) -> None:
    port, metrics_port = free_port(), free_port()
    control_plane, repo = unsynced_control_plane(tmp_path / "cp", {"rateLimit": {"address": f"127.0.0.1:{port}"}})
    start_control_plane(control_plane, processes)
    config = tmp_path / "rl" / "ratelimit.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(yaml.safe_dump({
        "listen": f"127.0.0.1:{port}",
        "metrics": {"listen": f"127.0.0.1:{metrics_port}"},
        "redis": {"url": redis.url, "timeout": "50ms"},
        "policies": {"xds": {"address": f"127.0.0.1:{control_plane.xds_port}", "nodeId": "ratelimit"}},
    }))
    process = launch("ratelimit", config, name="ratelimit", log_dir=config.parent, metrics_port=metrics_port)
    processes.append(process)
    address = f"127.0.0.1:{port}"

    assert statuses(address, RATELIMIT) == {"": "NOT_SERVING", RATELIMIT: "NOT_SERVING"}
    assert readyz(metrics_port) == 503
    watch = Watch(address)
    try:
        assert watch.next() == "NOT_SERVING"
        repo.write("routes.yaml", [ROUTE])
        repo.commit("first routes")  # the control plane syncs and sends the ratelimit its policies
        wait_health(process, address, "SERVING", RATELIMIT)
        assert readyz(metrics_port) == 200
        assert watch.next() == "SERVING"
    finally:
        watch.close()

    assert reflected_services(address) == {RATELIMIT, HEALTH, REFLECTION}
    assert_drains_on_sigterm(process, address, RATELIMIT)


def test_telemetry_serves_once_listening(tmp_path: Path, processes: list[ManagedProcess]) -> None:
    """Telemetry is ready as soon as its ALS server listens, so there is no NOT_SERVING to see
    from outside at start; SERVING must agree with /readyz, and SIGTERM must drain."""
    service = TelemetryServiceProcess(tmp_path / "telemetry", sink={"file": {"path": str(tmp_path / "access.jsonl")}})
    service.start()
    assert service.process is not None
    processes.append(service.process)
    address = service.address

    assert readyz(service.metrics_port) == 200
    assert statuses(address, ACCESS_LOG) == {"": "SERVING", ACCESS_LOG: "SERVING"}
    assert reflected_services(address) == {ACCESS_LOG, HEALTH, REFLECTION}
    assert_drains_on_sigterm(service.process, address, ACCESS_LOG)
