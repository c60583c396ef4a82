"""Every service restarts at once on its own ports (issue 25, item 3).

A container restarted in its pod keeps the network namespace: the connections the old
process had open (Envoy's pooled connections, a scraper's keep-alive, an xDS stream) are
left in the kernel as FIN_WAIT2 or TIME_WAIT on the service's port, for up to a minute. A
bind that does not set SO_REUSEADDR fails on them ("Address already in use"), as
ext_authz's supervisor did.

One gateway, real processes: Envoy (its ADS stream to the control plane, HTTP checks to
ext_authz, gRPC to ratelimit_svc, access logs to telemetry), Redis, and keep-alive
connections of our own to every port of the service under test (HTTP requests answered,
HTTP/2 prefaces acknowledged). The service is killed (SIGKILL, workers and all); half of
our connections are closed after the kill (the server's side goes to TIME_WAIT), half kept
open (FIN_WAIT2); the test checks those states are there, starts the service again on the
same ports at once, and requires it ready within seconds and Envoy served through it again.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness.ext_authz import ExtAuthzProcess
from tests.harness.gateway import GatewayStack
from tests.harness.http_client import get, wait_for
from tests.harness.issuer import TestIssuer
from tests.harness.ratelimit import RateLimitServiceProcess
from tests.harness.redis import RedisServer
from tests.harness.route_repo import route_doc
from tests.harness.telemetry import TelemetryServiceProcess
from tests.integration.conftest import StackFactory, ext_authz_entry

pytestmark = pytest.mark.redis

READY_TIMEOUT_S = 60.0
"""A cold start of a Python service on a busy 2-core machine can take 15 s; the restart
must take no longer than the first start did (with slack), and never meet a bound port."""
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
TCP_STATES = {"04": "FIN_WAIT1", "05": "FIN_WAIT2", "06": "TIME_WAIT", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN"}


@dataclass
class Gateway:
    stack: GatewayStack
    authz: ExtAuthzProcess
    ratelimit: RateLimitServiceProcess
    telemetry: TelemetryServiceProcess
    token: str
    authz_start_s: float
    """How long ext_authz's first start took (the restart's baseline)."""


def start(make_stack: StackFactory, tmp_path: Path, redis: RedisServer, *, workers: int) -> Gateway:
    issuer = TestIssuer()
    jwks = str(issuer.write_jwks(tmp_path / "jwks.json"))
    telemetry = TelemetryServiceProcess(tmp_path / "telemetry", sink={"file": {"path": str(tmp_path / "access.jsonl")}}).start()
    authz = ExtAuthzProcess(
        tmp_path / "authz",
        {
            "issuers": [{"issuer": issuer.issuer, "audiences": [issuer.audience], "jwksFile": jwks}],
            "revocation": {"redisUrl": redis.url},  # its gRPC admin port too
            "workers": workers,
        },
        transport="http",
        rate_limit={"redis": {"url": redis.url, "timeout": "200ms"}},
    )
    ratelimit = RateLimitServiceProcess(tmp_path / "ratelimit", redis_url=redis.url)
    stack = make_stack(control_plane_extra={
        "extAuthz": ext_authz_entry([authz]),
        "rateLimit": {"address": ratelimit.address, "timeout": "500ms"},
        "accessLog": {"address": telemetry.address, "bufferSize": 0, "flushInterval": "100ms"},
    })
    limit = [{"key": "ip", "algorithm": "fixedWindow", "limit": 100_000, "window": "1s"}]
    stack.commit_routes({"routes.yaml": [
        route_doc("orders", {"match": {"pathPrefix": "/orders"}, "backends": [{"service": "svc-a", "port": 8080}]}),
        route_doc("open", {"match": {"pathPrefix": "/open"}, "backends": [{"service": "svc-b", "port": 8080}],
                           "auth": {"required": False}, "rateLimits": limit}),
    ]})
    stack.start(wait_path="/open")
    ratelimit.start(stack.control_plane.xds_port)
    authz.use_control_plane(stack.control_plane.xds_port)
    started = time.monotonic()
    authz.start(timeout=READY_TIMEOUT_S)
    return Gateway(stack, authz, ratelimit, telemetry, issuer.token(), time.monotonic() - started)


def served(gateway: Gateway) -> bool:
    """Both routes through Envoy: the check (ext_authz), the limit (ratelimit_svc)."""
    try:
        orders = get(gateway.stack.listener_port, "/orders/1", headers={"authorization": f"Bearer {gateway.token}"})
        return orders.status == 200 and get(gateway.stack.listener_port, "/open/1").status == 200
    except OSError:
        return False


def hold(port: int, protocol: str) -> socket.socket:
    """A keep-alive connection the server has answered on (so it holds it open)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    if protocol == "http":
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n")
    else:
        sock.sendall(H2_PREFACE)
    assert sock.recv(4096), f"port {port} ({protocol}) answered"
    return sock


def lingering(ports: set[int]) -> dict[str, int]:
    """Server-side sockets on ``ports`` left by the killed process, by TCP state."""
    found: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            next(rows)
            for row in rows:
                local, remote, state = row.split()[1:4]
                if int(local.rsplit(":", 1)[1], 16) in ports and int(remote.rsplit(":", 1)[1], 16) != 0:
                    name = TCP_STATES.get(state)
                    if name in ("FIN_WAIT1", "FIN_WAIT2", "TIME_WAIT", "LAST_ACK"):
                        found[name] = found.get(name, 0) + 1
    return found


def restart_at_once(
    gateway: Gateway, ports: dict[int, str], kill: Callable[[], object], start_again: Callable[[], object], log: Path, *, baseline: float
) -> float:
    """Kill with connections held, start again at once; returns the restart's seconds."""
    held = [hold(port, protocol) for port, protocol in ports.items() for _ in range(2)]
    kill()
    for sock in held[::2]:
        sock.close()
    try:
        wait_for(lambda: "TIME_WAIT" in lingering(set(ports)) and "FIN_WAIT2" in lingering(set(ports)), 5,
                 "the old process's connections in TIME_WAIT and FIN_WAIT2")
        offset = log.stat().st_size
        started = time.monotonic()
        start_again()
        took = time.monotonic() - started
        text = log.read_bytes()[offset:].decode(errors="replace")
        assert "Address already in use" not in text, text[-2000:]
        assert took <= 2 * baseline + 5, f"restart {took:.1f} s, first start {baseline:.1f} s"
        wait_for(lambda: served(gateway), 15, "Envoy served through the restarted service")
        return took
    finally:
        for sock in held[1::2]:
            sock.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_ext_authz_restarts_at_once_on_its_ports(make_stack: StackFactory, tmp_path: Path, redis: RedisServer, workers: int) -> None:
    gateway = start(make_stack, tmp_path, redis, workers=workers)
    authz = gateway.authz
    try:
        wait_for(lambda: served(gateway), 15, "Envoy served")
        ports = {authz.port: "h2", authz.http_port: "http", authz.admin_port: "h2", authz.metrics_port: "http"}
        restart_at_once(gateway, ports, authz.kill, lambda: authz.start(timeout=READY_TIMEOUT_S),
                        authz.directory / f"{authz.name}.log", baseline=gateway.authz_start_s)
    finally:
        authz.stop()
        gateway.ratelimit.stop()
        gateway.telemetry.stop()


def test_ratelimit_and_telemetry_restart_at_once_on_their_ports(make_stack: StackFactory, tmp_path: Path, redis: RedisServer) -> None:
    gateway = start(make_stack, tmp_path, redis, workers=1)
    try:
        wait_for(lambda: served(gateway), 15, "Envoy served")
        xds = gateway.stack.control_plane.xds_port
        ratelimit, telemetry = gateway.ratelimit, gateway.telemetry
        restart_at_once(gateway, {ratelimit.port: "h2", ratelimit.metrics_port: "http"}, ratelimit.kill,
                        lambda: ratelimit.start(xds, timeout=READY_TIMEOUT_S), ratelimit.directory / "ratelimit.log",
                        baseline=gateway.authz_start_s)
        restart_at_once(gateway, {telemetry.port: "h2", telemetry.metrics_port: "http"}, telemetry.kill,
                        lambda: telemetry.start(timeout=READY_TIMEOUT_S), telemetry.directory / "telemetry.log",
                        baseline=gateway.authz_start_s)
    finally:
        gateway.authz.stop()
        gateway.ratelimit.stop()
        gateway.telemetry.stop()


def test_the_control_plane_restarts_at_once_on_its_ports(make_stack: StackFactory, tmp_path: Path, redis: RedisServer) -> None:
    gateway = start(make_stack, tmp_path, redis, workers=1)
    control_plane = gateway.stack.control_plane
    try:
        wait_for(lambda: served(gateway), 15, "Envoy served")
        ports = {control_plane.xds_port: "h2", control_plane.admin_port: "http"}
        restart_at_once(gateway, ports, control_plane.kill, lambda: control_plane.start(timeout=READY_TIMEOUT_S),
                        control_plane.log_dir / "control-plane.log", baseline=gateway.authz_start_s)
    finally:
        gateway.authz.stop()
        gateway.ratelimit.stop()
        gateway.telemetry.stop()
