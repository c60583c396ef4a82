"""Audit events from real processes to real Kafka: ext_authz denials, rejected route commits,
and nothing lost across a Kafka outage with an ext_authz restart in the middle."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.ext_authz import ExtAuthzProcess
from tests.harness.http_client import wait_for
from tests.harness.issuer import TestIssuer
from tests.harness.kafka import KafkaBroker
from tests.harness.route_repo import route_doc
from tests.integration.conftest import StackFactory, ext_authz_entry

pytestmark = pytest.mark.kafka

AUDIT = "gateway-audit-log"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    broker = KafkaBroker.start(tmp_path / "kafka")
    try:
        broker.create_topic(AUDIT)
        yield broker
    finally:
        broker.stop()


def audit_block(broker: KafkaBroker, spool: Path) -> dict[str, Any]:
    return {"kafka": {"bootstrapServers": [broker.bootstrap], "requestTimeout": "2s", "retryBackoff": "200ms"},
            "spoolDir": str(spool)}


def audit_events(broker: KafkaBroker, done: Callable[[list[dict[str, Any]]], bool], timeout: float = 60) -> list[dict[str, Any]]:
    """The audit topic's events, read again until ``done`` says they are all there."""
    deadline = time.monotonic() + timeout
    while True:
        events = [json.loads(v) for v in broker.read_all(AUDIT)]
        if done(events) or time.monotonic() > deadline:
            return events
        time.sleep(0.5)


def of(events: list[dict[str, Any]], kind: str, prefix: str = "") -> list[dict[str, Any]]:
    """Events of ``kind`` whose subject starts with ``prefix``, deduplicated by event_id."""
    unique = {e["event_id"]: e for e in events if e["kind"] == kind and str(e["subject"] or "").startswith(prefix)}
    return list(unique.values())


def routes() -> list[dict[str, Any]]:
    return [route_doc("orders", {"match": {"pathPrefix": "/orders"}, "backends": [{"service": "svc-a", "port": 8080}],
                                 "auth": {"scopes": ["orders:write"]}})]


def test_denials_survive_a_kafka_outage_and_an_ext_authz_restart(
    make_stack: StackFactory, tmp_path: Path, broker: KafkaBroker
) -> None:
    issuer = TestIssuer()
    jwks = str(issuer.write_jwks(tmp_path / "jwks.json"))
    authz = ExtAuthzProcess(tmp_path / "authz", {
        "issuers": [{"issuer": issuer.issuer, "audiences": [issuer.audience], "jwksFile": jwks}],
        "audit": audit_block(broker, tmp_path / "authz-spool"),
    }, transport="http")
    gateway = make_stack(control_plane_extra={"extAuthz": ext_authz_entry([authz])})
    gateway.commit_routes({"routes.yaml": routes()})
    gateway.start()
    authz.use_control_plane(gateway.control_plane.xds_port)
    authz.start()
    try:
        def deny(user: str) -> None:
            # A verified user without the scope: one audit event each (never summarised).
            reply = gateway.get("/orders", headers={"authorization": f"Bearer {issuer.token(user, scope='orders:read')}"})
            assert reply.status == 403, reply.status

        wait_for(lambda: gateway.get("/orders").status == 401, 15, "/orders behind ext_authz")
        deny("before")
        [first] = of(audit_events(broker, lambda es: bool(of(es, "authz.denied", "before"))), "authz.denied", "before")
        assert first["actor"] == "ext_authz" and first["reason"] and first["event_id"]
        assert "token" not in json.dumps(first).lower().replace("invalid_token", "")

        broker.kill()
        during = [f"outage-{i}" for i in range(8)]
        for user in during[:4]:
            deny(user)
        authz.stop()  # a restart during the outage: the spool must carry the events over
        authz.start()
        wait_for(lambda: gateway.get("/orders").status == 401, 15, "ext_authz back")
        for user in during[4:]:
            deny(user)
        broker.restart()

        events = audit_events(broker, lambda es: len(of(es, "authz.denied", "outage-")) >= len(during), timeout=90)
        subjects = sorted(str(e["subject"]) for e in of(events, "authz.denied", "outage-"))
        assert subjects == sorted(during), "every audit event arrives, once deduplicated by event_id"
    finally:
        authz.stop()


def test_a_rejected_route_commit_is_an_audit_event(make_stack: StackFactory, tmp_path: Path, broker: KafkaBroker) -> None:
    gateway = make_stack(control_plane_extra={"audit": audit_block(broker, tmp_path / "cp-spool")})
    gateway.commit_routes({"routes.yaml": [route_doc("a", {"match": {"path": "/a"}, "backends": [{"service": "svc-a", "port": 8080}]})]})
    gateway.start()
    bad = gateway.commit_routes({"routes.yaml": "apiVersion: gatehouse.io/v1alpha1\nkind: Route\nmetadata: {name: b}\n"
                                                "spec: {match: {path: /b, pathPrefix: /b}, backends: [{service: svc-a, port: 8080}]}\n"}, "bad")
    gateway.control_plane.sync()
    events = audit_events(broker, lambda es: bool(of(es, "config.rejected")))
    [rejected] = of(events, "config.rejected")
    assert rejected["actor"] == "control_plane" and rejected["subject"] == "git:routes"
    assert rejected["details"]["commit"] == bad
    assert "spec.match" in rejected["details"]["first_problem"]
    assert [e["details"]["routes"] for e in of(events, "config.applied")] == [1]
