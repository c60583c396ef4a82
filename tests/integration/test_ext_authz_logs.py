"""ext_authz's own log lines, from the real process over real gRPC: denials (bad signature,
expired, revoked, alg none) and an allowed check that drops an unsafe claim each leave JSON
lines that carry the request id, and nothing in the log is a token, a piece of one, the admin
credential, or a claim value other than the subject and jti of a verified token."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest
from envoy.service.auth.v3 import external_auth_pb2, external_auth_pb2_grpc
from google.rpc import code_pb2

from tests.harness.ext_authz import REPO_ROOT, ExtAuthzProcess
from tests.harness.http_client import wait_for
from tests.harness.issuer import TestIssuer, forge_signature
from tests.harness.redis import RedisServer
from tests.integration.test_ext_authz_grpc import check_request, issuer_entry, services  # noqa: F401 - fixtures

pytestmark = pytest.mark.redis

LOG_KEYS = {"timestamp", "level", "component", "event"}


def b64url(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def json_lines(service: ExtAuthzProcess) -> list[dict[str, Any]]:
    assert service.process is not None
    lines = []
    for raw in service.process.log_path.read_text().splitlines():
        if raw.startswith("{"):
            lines.append(json.loads(raw))
    return lines


def test_denial_log_lines_carry_the_request_id_and_no_token_or_claim(
    tmp_path: Path, redis: RedisServer, services: list[ExtAuthzProcess]  # noqa: F811 - fixtures
) -> None:
    issuer = TestIssuer()
    config = {"issuers": [issuer_entry(issuer, issuer.write_jwks(tmp_path / "jwks.json"))], "revocation": {"redisUrl": redis.url}}
    service = ExtAuthzProcess(tmp_path / "authz", config)
    services.append(service)
    service.start()

    marker = uuid.uuid4().hex[:12]
    private = {  # claim values that must never be logged
        "email": f"pii-{marker}@example.com",
        "scope": f"orders:read-{marker}",
        "role": f"role-{marker}",
        "note": f"note-{marker}",
    }
    subjects = {name: f"{name}-{marker}" for name in ("forger", "late", "nobody", "revokee", "unsafe")}
    forged = forge_signature(issuer.token(subjects["forger"], **private))
    expired = issuer.token(subjects["late"], ttl=-300, **private)
    alg_none = f"{b64url({'alg': 'none', 'typ': 'JWT'})}.{b64url({'iss': issuer.issuer, 'sub': subjects['nobody'], **private})}."
    revoked_jti = f"jti-{marker}"
    revoked = issuer.token(subjects["revokee"], jti=revoked_jti, **private)
    unsafe = issuer.token(subjects["unsafe"], **{**private, "role": f"admin\r\nx-evil-{marker}: 1"})
    tokens = [forged, expired, alg_none, revoked, unsafe]

    with grpc.insecure_channel(service.address) as channel:
        stub = external_auth_pb2_grpc.AuthorizationStub(channel)

        def check(token: str, request_id: str) -> external_auth_pb2.CheckResponse:
            response: external_auth_pb2.CheckResponse = stub.Check(
                check_request(f"Bearer {token}", request_id, route="shop/orders"), timeout=10
            )
            return response

        def reason(response: external_auth_pb2.CheckResponse) -> str:
            if response.status.code == code_pb2.OK:
                return "ok"
            return str(json.loads(response.denied_response.body)["error"]["reason"])

        assert reason(check(forged, "req-forged")) == "bad_signature"
        assert reason(check(expired, "req-expired")) == "expired"
        assert reason(check(alg_none, "req-none")) == "alg_not_allowed"
        assert reason(check(unsafe, "req-unsafe")) == "ok"
        assert reason(check(revoked, "req-before-revoke")) == "ok"
        result = subprocess.run(
            [sys.executable, "-m", "gatehouse", "revoke", "--jti", revoked_jti, "--ttl", "1h",
             "--admin", f"127.0.0.1:{service.admin_port}"],
            env=service.admin_env(), capture_output=True, text=True, timeout=30, cwd=REPO_ROOT,
        )
        assert result.returncode == 0, result.stderr
        wait_for(lambda: reason(check(revoked, "req-revoked")) == "revoked", 10, "the revoked token refused")

    expected = {"req-forged": "bad_signature", "req-expired": "expired", "req-none": "alg_not_allowed", "req-revoked": "revoked"}

    def denial_lines() -> dict[str, dict[str, Any]]:
        return {
            line["request_id"]: line
            for line in json_lines(service)
            if line.get("event") == "audit" and line.get("kind") == "authz.denied" and line.get("request_id") in expected
        }

    wait_for(lambda: set(denial_lines()) == set(expected), 10, "an audit log line for each denial")
    lines = json_lines(service)
    for request_id, line in denial_lines().items():
        assert line["reason"] == expected[request_id], line
        assert set(line) >= LOG_KEYS, line
        assert line["details"]["route"] == "shop/orders"
    assert (denial_lines()["req-revoked"]["subject"], denial_lines()["req-revoked"]["jti"]) == (subjects["revokee"], revoked_jti)
    for request_id in ("req-forged", "req-expired", "req-none"):
        assert denial_lines()[request_id]["subject"] is None, "an unverified token's subject is never logged"

    [dropped] = [line for line in lines if line.get("event") == "claims_not_forwarded"]
    assert dropped["request_id"] == "req-unsafe" and dropped["claims"] == ["role"], dropped
    sent = {"req-forged", "req-expired", "req-none", "req-unsafe", "req-before-revoke", "req-revoked"}
    assert {line["request_id"] for line in lines if "request_id" in line} <= sent, "no request id outside its check"
    for line in lines:
        assert {"timestamp", "level", "event"} <= set(line), line

    text = service.process.log_path.read_text() if service.process else ""
    for token in tokens:
        assert token not in text
        for piece in token.split("."):
            assert len(piece) < 16 or piece not in text, "no segment of a token is ever logged"
    for value in [*private.values(), f"x-evil-{marker}", service.credential]:
        assert value not in text, value
    for name in ("forger", "late", "nobody", "unsafe"):
        assert subjects[name] not in text, f"the unverified or allowed subject {name} is not logged"
