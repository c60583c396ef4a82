"""Access logs through real Envoy, ext_authz, the control plane, telemetry and Kafka."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.ext_authz import ExtAuthzProcess
from tests.harness.gateway import GatewayStack
from tests.harness.http_client import Load, wait_for
from tests.harness.issuer import TestIssuer
from tests.harness.kafka import KafkaBroker
from tests.harness.route_repo import route_doc
from tests.harness.telemetry import TelemetryServiceProcess
from tests.integration.conftest import StackFactory, ext_authz_entry

pytestmark = pytest.mark.kafka

ACCESS = "gateway-access-log"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    broker = KafkaBroker.start(tmp_path / "kafka")
    try:
        broker.create_topic(ACCESS)
        yield broker
    finally:
        broker.stop()


class Stack:
    def __init__(self, gateway: GatewayStack, telemetry: TelemetryServiceProcess, authz: ExtAuthzProcess) -> None:
        self.gateway, self.telemetry, self.authz = gateway, telemetry, authz

    def stop(self) -> None:
        self.telemetry.stop()
        self.authz.stop()


def start(make_stack: StackFactory, tmp_path: Path, broker: KafkaBroker, issuer: TestIssuer) -> Stack:
    telemetry = TelemetryServiceProcess(
        tmp_path / "telemetry",
        sink={"kafka": {"bootstrapServers": [broker.bootstrap], "requestTimeout": "2s", "retryBackoff": "200ms"}},
    ).start()
    jwks = str(issuer.write_jwks(tmp_path / "jwks.json"))
    authz = ExtAuthzProcess(
        tmp_path / "authz", {"issuers": [{"issuer": issuer.issuer, "audiences": [issuer.audience], "jwksFile": jwks}]},
        transport="http",
    )
    gateway = make_stack(control_plane_extra={
        "extAuthz": ext_authz_entry([authz]),
        "accessLog": {"address": telemetry.address, "bufferSize": 0, "flushInterval": "100ms"},
    })
    gateway.commit_routes({"routes.yaml": [
        route_doc("orders", {"match": {"pathPrefix": "/orders"}, "backends": [{"service": "svc-a", "port": 8080}]}),
        route_doc("open", {"match": {"pathPrefix": "/open"}, "backends": [{"service": "svc-b", "port": 8080}],
                           "auth": {"required": False}}),
    ]})
    gateway.start()
    authz.use_control_plane(gateway.control_plane.xds_port)
    authz.start()
    return Stack(gateway, telemetry, authz)


def events(broker: KafkaBroker, path_prefix: str, expected: int, timeout: float = 30) -> list[dict[str, Any]]:
    """Access events for paths under ``path_prefix``, waiting until ``expected`` of them arrived."""
    deadline = time.monotonic() + timeout
    found: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        values = broker.read_all(ACCESS)
        found = [e for e in map(json.loads, values) if str(e["path"]).startswith(path_prefix)]
        if len(found) >= expected:
            return found
        time.sleep(0.3)
    raise AssertionError(f"{len(found)} of {expected} access events for {path_prefix} arrived")


def test_every_request_becomes_one_access_event_with_the_verified_user(
    make_stack: StackFactory, tmp_path: Path, broker: KafkaBroker
) -> None:
    issuer = TestIssuer()
    stack = start(make_stack, tmp_path, broker, issuer)
    try:
        gw = stack.gateway
        alice = {"authorization": f"Bearer {issuer.token('alice')}"}
        wait_for(lambda: gw.get("/orders/0", headers=alice).status == 200, 15, "/orders through ext_authz")
        n = 25
        replies = [gw.get(f"/orders/{i}", headers={**alice, "x-request-id": f"req-{i}"}) for i in range(1, n + 1)]
        assert [r.status for r in replies] == [200] * n
        # A client claiming to be someone on a public route is not logged as them.
        spoofed = gw.get("/open/x", headers={"x-user-id": "mallory", "traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"})
        assert spoofed.status == 200
        denied = gw.get("/orders/denied")
        assert denied.status == 401

        got = {e["request_id"]: e for e in events(broker, "/orders/", n + 2) if str(e["request_id"]).startswith("req-")}
        assert sorted(got) == sorted(f"req-{i}" for i in range(1, n + 1)), "exactly one event per request"
        svc_a = f"127.0.0.1:{gw.upstreams['svc-a'].port}"
        for i in range(1, n + 1):
            event = got[f"req-{i}"]
            assert (event["method"], event["path"], event["status"]) == ("GET", f"/orders/{i}", 200)
            assert event["user_id"] == "alice"
            assert event["route"] == "default/orders"
            assert event["upstream_host"] == svc_a and event["upstream_cluster"] == "default/svc-a:8080"
            assert event["client_ip"] == "127.0.0.1"
            assert event["latency_ms"]["total"] >= event["latency_ms"]["upstream"] >= 0
            assert event["response_bytes"] > 0
        [open_event] = events(broker, "/open/", 1)
        assert open_event["user_id"] is None, "a client-sent x-user-id is stripped before it can be logged"
        assert open_event["trace_id"] == "a" * 32
        [denial] = [e for e in events(broker, "/orders/denied", 1)]
        assert (denial["status"], denial["upstream_host"], denial["user_id"]) == (401, None, None)
        assert "UAEX" in denial["response_flags"]
    finally:
        stack.stop()


def test_a_kafka_outage_drops_and_counts_access_events_and_never_fails_a_request(
    make_stack: StackFactory, tmp_path: Path, broker: KafkaBroker
) -> None:
    issuer = TestIssuer()
    stack = start(make_stack, tmp_path, broker, issuer)
    try:
        gw = stack.gateway
        wait_for(lambda: gw.get("/open/warm").status == 200, 15, "/open served")
        events(broker, "/open/warm", 1)
        broker.kill()
        with Load(gw.listener_port, ["/open/load"], workers=3) as load:
            time.sleep(4)
        statuses = load.report.statuses
        assert set(statuses) == {200} and statuses[200] > 100, statuses
        wait_for(lambda: stack.telemetry.metric("gatehouse_telemetry_access_dropped_total") > 0, 20,
                 "access events dropped and counted while Kafka is down")
        broker.restart()
        replies = [gw.get("/open/after", headers={"x-request-id": f"after-{i}"}) for i in range(5)]
        assert [r.status for r in replies] == [200] * 5
        after = {e["request_id"] for e in events(broker, "/open/after", 5, timeout=60)}
        assert {f"after-{i}" for i in range(5)} <= after, "access events flow again once Kafka is back"
    finally:
        stack.stop()
