"""Operator control of the route breakers against a real control plane process (with a
real Envoy connected): `gatehouse breaker` moves the board, the moves are audit events
in the control plane's audit stream (the log sink, as in test_breaker_detection.py), the
metrics and `gatehouse status` show them, and refusals are clear and change nothing.
(What Envoy answers in each phase is the translator's part of issue 16, tested with it.)"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.harness.gateway import GatewayStack
from tests.harness.route_repo import route_doc
from tests.integration.conftest import StackFactory

BACKEND = [{"service": "svc-a", "port": 8080}]
BREAKER = {"errorRate": {"window": "30s", "minimumCalls": 20, "failureRateThreshold": 50, "waitInOpen": "2s", "halfOpenProbes": 3}}


def start(make_stack: StackFactory, tmp_path: Path) -> tuple[GatewayStack, Path]:
    secret = tmp_path / "operator-credential"
    secret.write_text(secrets.token_urlsafe(24))
    stack = make_stack(control_plane_extra={"breakers": {"operatorCredentialFile": str(secret)}})
    stack.commit_routes({"r.yaml": [
        route_doc("ok", {"auth": {"required": False}, "match": {"pathPrefix": "/ok"}, "backends": BACKEND}),
        route_doc("orders", {"auth": {"required": False}, "match": {"pathPrefix": "/orders"}, "backends": BACKEND, "circuitBreaker": BREAKER}),
    ]})
    stack.start(wait_path="/ok")
    return stack, secret


def cli(stack: GatewayStack, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gatehouse", "breaker", *argv, "--admin", stack.control_plane.admin_url],
        capture_output=True, text=True, timeout=30, env={**os.environ, **(env or {})},
    )


def breakers(stack: GatewayStack) -> dict[str, dict[str, Any]]:
    with urllib.request.urlopen(f"{stack.control_plane.admin_url}/breakers", timeout=5) as response:
        return {b["route"]: b for b in json.loads(response.read())["breakers"]}


def audit_moves(stack: GatewayStack) -> list[dict[str, Any]]:
    lines = stack.control_plane.log_tail(5000).splitlines()
    events = [json.loads(line) for line in lines if '"breaker.transition"' in line and '"audit"' in line]
    return [e for e in events if e.get("actor") == "operator"]


def test_the_cli_opens_closes_and_releases_a_breaker_audited_and_shown(make_stack: StackFactory, tmp_path: Path) -> None:
    stack, secret = start(make_stack, tmp_path)
    shown = cli(stack, "status")
    assert shown.returncode == 0 and "default/orders" in shown.stdout and "CLOSED" in shown.stdout, shown
    assert list(breakers(stack)) == ["default/orders"], "only the route with circuitBreaker.errorRate"

    opened = cli(stack, "open", "default/orders", "--credential-file", str(secret), "--reason", "INC-7 orders db failover")
    assert opened.returncode == 0 and opened.stdout.strip() == "default/orders: now OPEN, pinned until released", opened
    state = breakers(stack)["default/orders"]
    assert (state["phase"], state["pinned"], state["actor"], state["reason"]) == ("open", True, "operator", "INC-7 orders db failover")
    status = cli(stack, "status", "default/orders")
    assert status.returncode == 1 and "OPEN, pinned until released" in status.stdout, status
    assert stack.control_plane.metric("gatehouse_breaker_state", route="default/orders", phase="open") == 1.0
    assert stack.control_plane.metric("gatehouse_breaker_state", route="default/orders", phase="closed") == 0.0
    overview = subprocess.run(
        [sys.executable, "-m", "gatehouse", "status", "--admin", stack.control_plane.admin_url], capture_output=True, text=True, timeout=30
    )
    assert "route breakers:" in overview.stdout and "OPEN, pinned until released" in overview.stdout, overview.stdout

    # The credential from the environment, as a script would pass it.
    closed = cli(stack, "close", "default/orders", env={"GATEHOUSE_BREAKER_CREDENTIAL": secret.read_text()})
    assert closed.returncode == 0 and "now CLOSED, pinned until released" in closed.stdout, closed
    again = cli(stack, "close", "default/orders", "--credential-file", str(secret))
    assert again.returncode == 0 and "already CLOSED" in again.stdout
    released = cli(stack, "release", "default/orders", "--credential-file", str(secret))
    assert released.returncode == 0 and released.stdout.strip() == "default/orders: now CLOSED", released
    timed = cli(stack, "open", "default/orders", "--for", "10m", "--credential-file", str(secret), "--json")
    answer = json.loads(timed.stdout)
    assert answer["breaker"]["pinned"] is False and answer["breaker"]["open_until"] > 0, answer

    moves = audit_moves(stack)
    assert [(e["subject"], e["details"]["action"], e["details"]["to"], e["details"]["pinned"]) for e in moves] == [
        ("default/orders", "open", "open", True),
        ("default/orders", "close", "closed", True),
        ("default/orders", "release", "closed", False),
        ("default/orders", "open", "open", False),
    ], moves
    assert moves[0]["reason"] == "INC-7 orders db failover" and "@" in moves[0]["details"]["operator"]
    assert secret.read_text() not in stack.control_plane.log_tail(5000), "the credential is never logged"
    assert stack.control_plane.metric("gatehouse_breaker_transitions_total", to="open", actor="operator") == 2.0


def test_refusals_are_clear_and_change_nothing(make_stack: StackFactory, tmp_path: Path, refused_address: str) -> None:
    stack, secret = start(make_stack, tmp_path)
    wrong = tmp_path / "wrong-credential"
    wrong.write_text(secrets.token_urlsafe(24))

    refused = cli(stack, "open", "default/orders", "--credential-file", str(wrong))
    assert refused.returncode == 2 and refused.stderr.strip() == (
        f"error: the control plane at {stack.control_plane.admin_url} refused the operator credential"
    ), refused
    assert wrong.read_text() not in refused.stderr + stack.control_plane.log_tail(5000)
    missing = cli(stack, "open", "default/orders", env={"GATEHOUSE_BREAKER_CREDENTIAL": ""})
    assert missing.returncode == 2 and "no operator credential" in missing.stderr
    unknown = cli(stack, "open", "default/nope", "--credential-file", str(secret))
    assert unknown.returncode == 2 and "no route 'default/nope' with a breaker" in unknown.stderr, unknown
    plain = cli(stack, "open", "default/ok", "--credential-file", str(secret))
    assert plain.returncode == 2 and "no route 'default/ok' with a breaker (circuitBreaker.errorRate)" in plain.stderr
    bad_for = cli(stack, "open", "default/orders", "--for", "soon", "--credential-file", str(secret))
    assert bad_for.returncode == 2 and "openFor: 'soon' is not a duration" in bad_for.stderr, bad_for
    bad_route = cli(stack, "open", "orders", "--credential-file", str(secret))
    assert bad_route.returncode == 2 and "use NAMESPACE/NAME" in bad_route.stderr
    down = subprocess.run(
        [sys.executable, "-m", "gatehouse", "breaker", "status", "--admin", f"http://{refused_address}"],
        capture_output=True, text=True, timeout=30,
    )
    assert down.returncode == 2 and "cannot reach the control plane" in down.stderr and "refused" in down.stderr, down

    request = urllib.request.Request(
        f"{stack.control_plane.admin_url}/breakers/default/orders/explode", data=b"{}", method="POST",
        headers={"Authorization": f"Bearer {secret.read_text()}"},
    )
    try:
        urllib.request.urlopen(request, timeout=5)
        raise AssertionError("an unknown action must be refused")
    except urllib.error.HTTPError as exc:
        assert exc.code == 400 and "is not one of open, close, half-open, release" in json.loads(exc.read())["error"]

    assert breakers(stack)["default/orders"]["generation"] == 0, "nothing moved"
    assert audit_moves(stack) == []
    unauthenticated = [line for line in stack.control_plane.log_tail(5000).splitlines() if '"admin.call"' in line]
    assert len(unauthenticated) == 1 and '"unauthenticated"' in unauthenticated[0]


_READ_BREAKERS = """
return [...document.querySelectorAll("#breakers-body tr[data-route]")].map(
  (r) => ({route: r.dataset.route, phase: r.dataset.phase, cells: [...r.cells].map((c) => c.innerText)}));
"""


def test_the_status_page_shows_an_operator_open_with_its_reason_as_text(make_stack: StackFactory, tmp_path: Path) -> None:
    from tests.harness.browser import chromium, screenshot_on_failure
    from tests.harness.http_client import wait_for

    with chromium(tmp_path / "chromium") as driver:
        stack, secret = start(make_stack, tmp_path)
        with screenshot_on_failure(driver, tmp_path):
            driver.get(stack.control_plane.admin_url + "/?refresh=0.5")
            wait_for(lambda: [r["phase"] for r in driver.execute_script(_READ_BREAKERS)] == ["closed"], 20, "the breaker row, CLOSED")
            markup = '<img src=x onerror="window.pwned=1">'
            opened = cli(stack, "open", "default/orders", "--credential-file", str(secret), "--reason", f"INC-9 {markup}")
            assert opened.returncode == 0, opened
            wait_for(lambda: [r["phase"] for r in driver.execute_script(_READ_BREAKERS)] == ["open"], 10, "the breaker row, OPEN")
            (row,) = driver.execute_script(_READ_BREAKERS)
            route, phase, _since, actor, counting, _generation, reason = row["cells"]
            assert (route, actor, reason) == ("default/orders", "operator", f"INC-9 {markup}"), row
            assert phase.startswith("OPEN") and "pinned" in phase and counting.startswith("window: 0 calls"), row
            assert driver.execute_script("return document.querySelectorAll('#breakers-body img').length") == 0
            assert driver.execute_script("return window.pwned === undefined")
