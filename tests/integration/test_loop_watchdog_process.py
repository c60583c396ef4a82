"""The loop watchdog in a real service process: a blocking call injected into the
authorization handler is caught with its stack, counted and reported; the same service
without it reports nothing."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import grpc
from envoy.service.auth.v3 import attribute_context_pb2, external_auth_pb2, external_auth_pb2_grpc

from servicekit import loop_watchdog
from tests.harness.ext_authz import ExtAuthzProcess
from tests.harness.issuer import TestIssuer

AttributeContext = attribute_context_pb2.AttributeContext


def check(service: ExtAuthzProcess) -> None:
    request = external_auth_pb2.CheckRequest(
        attributes=AttributeContext(request=AttributeContext.Request(http=AttributeContext.HttpRequest(method="GET", path="/", headers={})))
    )
    with grpc.insecure_channel(service.address) as channel:
        response = external_auth_pb2_grpc.AuthorizationStub(channel).Check(request, timeout=10)
    assert response.denied_response.status.code == 401


def start(tmp_path: Path, name: str, reports: Path, launcher: tuple[str, ...] = ()) -> ExtAuthzProcess:
    issuer = TestIssuer()
    jwks = issuer.write_jwks(tmp_path / f"{name}-jwks.json")
    service = ExtAuthzProcess(tmp_path / name, {"issuers": [{"issuer": issuer.issuer, "jwksFile": str(jwks)}]}, name=name)
    # This test's own report directory: the suite's (tests/conftest.py) must stay clean.
    env = {**os.environ, loop_watchdog.SETTING: "100ms", loop_watchdog.REPORT_DIR: str(reports)}
    return service.start(launcher=launcher, env=env)


def reports_in(directory: Path) -> list[dict[str, object]]:
    return [json.loads(line) for path in sorted(directory.glob("*.jsonl")) for line in path.read_text().splitlines()]


def test_an_injected_time_sleep_in_a_handler_is_caught_with_its_stack(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    shim = (sys.executable, "-m", "tests.harness.blocking_shim", "0.3")
    service = start(tmp_path, "blocking", reports, shim)
    try:
        check(service)
        deadline = time.monotonic() + 5
        while not reports_in(reports) and time.monotonic() < deadline:
            time.sleep(0.05)
        [report] = reports_in(reports)
        assert report["service"] == "ext-authz" and report["pid"] == service.process.pid  # type: ignore[union-attr]
        assert 250 <= float(report["held_ms"]) < 2000, report  # type: ignore[arg-type]
        assert "time.sleep(seconds)" in str(report["culprit"]), report["culprit"]
        assert any("in decide" in frame for frame in report["stack"]), report["stack"]  # type: ignore[union-attr]
        assert service.metric("gatehouse_event_loop_stalls_total") == 1
        log = service.process.log_path.read_text()  # type: ignore[union-attr]
        assert '"event": "event_loop_blocked"' in log and "time.sleep(seconds)" in log
    finally:
        service.stop()


def test_the_same_service_without_the_blocking_call_reports_nothing(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    service = start(tmp_path, "plain", reports)
    try:
        for _ in range(20):
            check(service)
        time.sleep(0.3)  # longer than the threshold: an idle loop is not a stall
        assert reports_in(reports) == []
        assert service.metric("gatehouse_event_loop_stalls_total") == 0
        assert "loop_watchdog_on" in service.process.log_path.read_text()  # type: ignore[union-attr]
    finally:
        service.stop()
