"""The control plane's admin port, through the real process (issue 24, item 7): one test
per hole, each named for it (``test_hole_*``).

- ``POST /sync`` took writes from anyone: now 401 without the operator credential (or with
  a wrong one, or with the read one, or with it as a Basic password a browser would replay);
- ... and from a cross-site ``Origin`` (a CSRF from any browser): now 403, credential or not;
- ``GET /config`` and ``/status/node?diff=1`` were open to anyone who reached the port: now,
  where the config does not open the reads, 401 without the read credential, 200 with it
  (bearer, or Basic for the status page in a browser).

The probes stay open, the status page works for a reader, an open read (a loopback peer)
is refused to a browser that names the port under another host (DNS rebinding), and the
CLI reads with the read credential.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from gatehouse.commands import admin_credential
from tests.harness.browser import chromium, screenshot_on_failure
from tests.harness.gateway import GatewayStack
from tests.harness.http_client import wait_for
from tests.harness.route_repo import route_doc
from tests.integration.conftest import StackFactory
from tests.integration.test_status_page import wait_page

ROUTES = {"r.yaml": [route_doc("a", {"auth": {"required": False}, "match": {"pathPrefix": "/a"}, "backends": [{"service": "svc-a", "port": 8080}]})]}
READ_CREDENTIAL = "read-" + "r" * 27
WEBHOOK_SECRET = "hook-" + "w" * 27


def call(stack: GatewayStack, method: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", stack.control_plane.admin_port, timeout=30)
    try:
        connection.request(method, path, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def post(stack: GatewayStack, path: str, body: bytes, headers: dict[str, str], method: str = "POST") -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", stack.control_plane.admin_port, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def signed(secret: bytes, body: bytes) -> str:
    """GitHub's X-Hub-Signature-256, written out here rather than taken from the code under test."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def bearer(credential: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


def basic(password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"anyone:{password}".encode()).decode()}


def operator(stack: GatewayStack) -> str:
    credential = stack.control_plane.credential("operator")
    assert credential, "the harness gives every control plane an operator credential"
    return credential


def started(make_stack: StackFactory, tmp_path: Path, admin: dict[str, Any] | None = None) -> GatewayStack:
    extra = {"admin": admin} if admin is not None else None
    stack = make_stack(upstreams=("svc-a",), control_plane_extra=extra)
    stack.commit_routes(ROUTES)
    stack.start(wait_path="/a")
    return stack


def closed_reads(make_stack: StackFactory, tmp_path: Path) -> GatewayStack:
    """Reads need the read credential (``openReads: never``), as the Helm chart has it."""
    secret = tmp_path / "read-credential"
    secret.write_text(READ_CREDENTIAL + "\n")
    return started(make_stack, tmp_path, {"openReads": "never", "readCredentialFile": str(secret)})


def test_hole_sync_without_the_operator_credential_is_401(make_stack: StackFactory, tmp_path: Path) -> None:
    stack = started(make_stack, tmp_path)
    credential = operator(stack)
    for name, headers in [
        ("none", {}),
        ("wrong", bearer("x" * 32)),
        ("another scheme", {"Authorization": f"Token {credential}"}),
        ("as a Basic password (a browser replays those)", basic(credential)),
    ]:
        status, reply_headers, body = call(stack, "POST", "/sync", headers)
        assert status == 401, (name, status, body)
        assert reply_headers["www-authenticate"].startswith("Bearer") and credential.encode() not in body, name
    # The refusal is audited (the audit goes to the log without Kafka), never with the credential.
    wait_for(lambda: "admin.call" in stack.control_plane.log_tail(400), 5, "an admin.call audit event for the refused sync")
    assert credential not in stack.control_plane.log_tail(2000)
    status, _, body = call(stack, "POST", "/sync", bearer(credential))
    assert status == 200 and "routes" in json.loads(body)["sources"], body


def test_a_git_hosts_signed_webhook_syncs_and_nothing_else(make_stack: StackFactory, tmp_path: Path) -> None:
    """A GitHub webhook cannot send a bearer credential; it signs the body
    (``X-Hub-Signature-256``). With ``admin.webhookSecretFile`` such a ``POST /sync`` syncs
    (the commit is served), a wrong or stale signature is 401, and the signature opens no
    read and no breaker move."""
    secret_file = tmp_path / "webhook-secret"
    secret_file.write_text(WEBHOOK_SECRET + "\n")
    stack = started(make_stack, tmp_path, {"webhookSecretFile": str(secret_file), "openReads": "never"})
    stack.commit_routes({**ROUTES, "b.yaml": [route_doc("b", {"auth": {"required": False}, "match": {"pathPrefix": "/b"},
                                                                "backends": [{"service": "svc-a", "port": 8080}]})]})
    payload = json.dumps({"ref": "refs/heads/main", "after": "0" * 40}).encode()
    github = {"X-GitHub-Event": "push", "Content-Type": "application/json", "User-Agent": "GitHub-Hookshot/abc123"}
    for name, signature in [
        ("another secret", signed(b"x" * 32, payload)),
        ("another body", signed(WEBHOOK_SECRET.encode(), payload + b" ")),
        ("sha1, not sha256", "sha1=" + hmac.new(WEBHOOK_SECRET.encode(), payload, hashlib.sha1).hexdigest()),
        ("empty", ""),
    ]:
        status, _, body = post(stack, "/sync", payload, {**github, "X-Hub-Signature-256": signature})
        assert status == 401, (name, status, body)
        assert WEBHOOK_SECRET.encode() not in body
    status, _, body = post(stack, "/sync", payload, {**github, "X-Hub-Signature-256": signed(WEBHOOK_SECRET.encode(), payload)})
    assert status == 200 and "routes" in json.loads(body)["sources"], body
    stack.wait_upstream("/b", "svc-a")
    assert WEBHOOK_SECRET not in stack.control_plane.log_tail(2000)
    # The signature is for /sync alone: not a read, not a breaker move.
    status, _, _ = post(stack, "/status", b"", {"X-Hub-Signature-256": signed(WEBHOOK_SECRET.encode(), b"")}, method="GET")
    assert status == 401
    status, _, _ = post(stack, "/breakers/default/a/open", b"{}", {"X-Hub-Signature-256": signed(WEBHOOK_SECRET.encode(), b"{}")})
    assert status in (401, 404, 503), status


def test_hole_sync_from_a_cross_site_origin_is_403(make_stack: StackFactory, tmp_path: Path) -> None:
    stack = started(make_stack, tmp_path)
    credential = operator(stack)
    here = f"http://127.0.0.1:{stack.control_plane.admin_port}"
    for name, headers in [
        ("a foreign Origin", {"Origin": "http://attacker.example"}),
        ("a null Origin (sandboxed frame)", {"Origin": "null"}),
        ("the same host on another port", {"Origin": f"http://127.0.0.1:{stack.control_plane.admin_port + 1}"}),
        ("Sec-Fetch-Site: cross-site", {"Sec-Fetch-Site": "cross-site"}),
        ("Sec-Fetch-Site: same-site", {"Sec-Fetch-Site": "same-site", "Origin": here}),
        ("a browser's write without an Origin", {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}),
    ]:
        for authorization in ({}, bearer(credential)):
            status, _, body = call(stack, "POST", "/sync", {**headers, **authorization})
            assert status == 403, (name, bool(authorization), status, body)
    # A cross-site read is refused the same way; the probes are never refused.
    assert call(stack, "GET", "/config", {"Origin": "http://attacker.example"})[0] == 403
    assert call(stack, "GET", "/readyz", {"Origin": "http://attacker.example", "Sec-Fetch-Site": "cross-site"})[0] == 200
    # This very page (same origin), with the credential: the write goes through.
    status, _, body = call(stack, "POST", "/sync", {"Origin": here, "Sec-Fetch-Site": "same-origin", **bearer(credential)})
    assert status == 200, body


def test_hole_config_and_node_diff_reads_need_the_read_credential(make_stack: StackFactory, tmp_path: Path) -> None:
    stack = closed_reads(make_stack, tmp_path)
    node = f"/status/node?node={stack.node_id}&diff=1"
    reads = ["/config", "/config?type=RDS", node, "/status", "/status/routes", "/", "/breakers"]
    for path in reads:
        status, headers, body = call(stack, "GET", path)
        assert status == 401, (path, status, body[:200])
        assert headers["www-authenticate"].startswith("Basic realm="), path  # a browser asks for it
        assert b"route_config" not in body and b'"a"' not in body, path
        assert call(stack, "GET", path, bearer("x" * 32))[0] == 401, path
    # The probes stay open: the kubelet and Prometheus send no credential.
    for path in ("/healthz", "/readyz", "/metrics"):
        assert call(stack, "GET", path)[0] == 200, path
    # With the read credential (bearer), or the operator's, or as the Basic password: served.
    for authorization in (bearer(READ_CREDENTIAL), bearer(operator(stack)), basic(READ_CREDENTIAL)):
        status, _, body = call(stack, "GET", "/config?type=RDS", authorization)
        assert status == 200 and "RDS" in json.loads(body), body[:200]
        status, _, body = call(stack, "GET", node, authorization)
        assert status == 200 and json.loads(body)["diff"] == {}, body[:300]
    # The status page and what it polls, for a browser that gave the credential.
    status, headers, page = call(stack, "GET", "/", basic(READ_CREDENTIAL))
    assert status == 200 and headers["content-type"].startswith("text/html"), page[:200]
    polled = {"Sec-Fetch-Site": "same-origin", **basic(READ_CREDENTIAL)}
    assert json.loads(call(stack, "GET", "/status", polled)[2])["ready"] is True
    assert call(stack, "GET", "/status/routes", polled)[0] == 200
    # The read credential reads; it does not write.
    assert call(stack, "POST", "/sync", bearer(READ_CREDENTIAL))[0] == 401
    # The harness (and so gatehouse status's users) read with the credential from the config.
    assert stack.control_plane.status()["ready"] is True


def test_open_reads_on_loopback_are_refused_to_a_browser_under_another_name(make_stack: StackFactory, tmp_path: Path) -> None:
    """The default (``openReads: loopback``): a client on this machine (a loopback peer)
    reads without a credential; a browser page whose name was rebound to 127.0.0.1 is
    same-origin to the browser, but names another host: it needs the credential."""
    stack = started(make_stack, tmp_path)
    port = stack.control_plane.admin_port
    assert call(stack, "GET", "/config?type=RDS")[0] == 200
    assert call(stack, "GET", "/config?type=RDS", {"Sec-Fetch-Site": "same-origin", "Host": f"127.0.0.1:{port}"})[0] == 200
    assert call(stack, "GET", "/", {"Sec-Fetch-Site": "none", "Host": f"localhost:{port}"})[0] == 200
    rebound = {"Sec-Fetch-Site": "same-origin", "Host": f"attacker.example:{port}"}
    for path in ("/config?type=RDS", "/status", "/"):
        status, _, body = call(stack, "GET", path, rebound)
        assert status == 401 and b"route_config" not in body, (path, status, body[:200])
    # A credential still opens it (the operator's reads; this config has no read credential).
    assert call(stack, "GET", "/config?type=RDS", {**rebound, **bearer(operator(stack))})[0] == 200


def test_the_cli_reads_with_the_read_credential(make_stack: StackFactory, tmp_path: Path) -> None:
    """`gatehouse status` and `gatehouse breaker status` where reads are closed: a clear
    error without the credential, served with it (file or environment)."""
    stack = closed_reads(make_stack, tmp_path)
    admin = ["--admin", stack.control_plane.admin_url]
    environment = {k: v for k, v in os.environ.items() if k != admin_credential.ENV}

    def run(*argv: str, env: dict[str, str] = environment) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gatehouse", *argv, *admin], capture_output=True, text=True, timeout=60, env=env)

    credential_file = str(tmp_path / "read-credential")
    outputs = {}
    for command in (["status"], ["breaker", "status"]):
        refused = run(*command)
        assert refused.returncode == 2 and "refused the read credential: pass --credential-file PATH" in refused.stderr, (command, refused.stderr)
        assert READ_CREDENTIAL not in refused.stderr
        served = run(*command, "--credential-file", credential_file)
        assert served.returncode == 0, (command, served.stdout, served.stderr)
        outputs[command[0]] = served.stdout
    assert stack.node_id in outputs["status"], outputs
    assert run("status", env={**environment, admin_credential.ENV: READ_CREDENTIAL}).returncode == 0


def test_the_status_page_works_in_a_browser_for_a_reader(make_stack: StackFactory, tmp_path: Path) -> None:
    """Reads closed, a headless Chromium: without the credential the page is the 401; with
    it (the Basic header a browser sends once the person typed the password) the page loads,
    and its own polls of /status and /status/routes are allowed (same origin)."""
    with chromium(tmp_path / "chromium") as driver:
        stack = closed_reads(make_stack, tmp_path)
        page = stack.control_plane.admin_url + "/?refresh=0.5"
        with screenshot_on_failure(driver, tmp_path):
            driver.get(page)
            # The browser got the 401 and its Basic challenge (a headless one shows no prompt).
            assert driver.title != "Gatehouse status" and "sources-body" not in driver.page_source
            driver.execute_cdp_cmd("Network.enable", {})
            driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": basic(READ_CREDENTIAL)})
            driver.get(page)
            assert driver.title == "Gatehouse status"
            shown = wait_page(driver, lambda p: "in sync" in p["envoys"].get(stack.node_id, "") and "default/a" in p["routes"],
                              "the Envoy in sync and the route, from the page's own polls")
            assert shown["banner"] == "" and shown["updates"] >= 1
