"""servicekit/webhook_signature.py against GitHub's documented example, and the admin port's
POST /sync taking a signed body (control_plane/admin_access.py) but nothing else."""

from __future__ import annotations

import hashlib
import hmac

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given
from hypothesis import strategies as st

from control_plane.admin_access import AdminAccess
from servicekit.audit import MemoryAuditSink
from servicekit.webhook_signature import WebhookSignature

SECRET, OPERATOR = "It's a Secret to Everybody", "o" * 32


def test_githubs_documented_example() -> None:
    # docs.github.com, "Validating webhook deliveries": secret, payload and signature.
    expected = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    signature = WebhookSignature(SECRET)
    assert signature.sign(b"Hello, World!") == expected
    assert signature.verifies(b"Hello, World!", expected)
    assert signature.verifies(b"Hello, World!", expected.upper().replace("SHA256=", "sha256="))
    assert not signature.verifies(b"Hello, World?", expected)
    assert not signature.verifies(b"Hello, World!", expected.removeprefix("sha256="))
    assert not signature.verifies(b"Hello, World!", "sha1=" + expected.removeprefix("sha256="))
    assert not signature.verifies(b"Hello, World!", "sha256=\u00e9\u00e9")


@given(st.binary(max_size=200), st.text(max_size=80))
def test_only_the_secrets_hmac_of_the_body_verifies(body: bytes, header: str) -> None:
    signature = WebhookSignature(SECRET)
    right = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    assert signature.verifies(body, header) == (header.strip().lower() == right)


async def sync(_: web.Request) -> web.StreamResponse:
    return web.Response(text="synced")


async def test_sync_takes_a_signature_and_the_operator_but_a_breaker_move_only_the_operator() -> None:
    audit = MemoryAuditSink()
    access = AdminAccess(operator=OPERATOR, reader=None, open_reads="never", audit=audit, webhook_secret=SECRET)
    app = web.Application(middlewares=[access.middleware], client_max_size=1024)
    app.router.add_post("/sync", access.operator_or_webhook(sync))
    app.router.add_post("/move", access.operator_only(sync))
    app.router.add_get("/status", sync)
    body = b'{"ref": "refs/heads/main"}'
    good = {"X-Hub-Signature-256": WebhookSignature(SECRET).sign(body)}
    async with TestClient(TestServer(app)) as client:
        assert (await client.post("/sync", data=body, headers=good)).status == 200
        assert (await client.post("/sync", data=body, headers={"Authorization": f"Bearer {OPERATOR}"})).status == 200
        assert (await client.post("/sync", data=body + b" ", headers=good)).status == 401
        assert (await client.post("/sync", data=body)).status == 401
        assert (await client.post("/sync", data=b"x" * 2048, headers=good)).status == 413
        assert (await client.post("/move", data=body, headers=good)).status == 401
        assert (await client.get("/status", headers=good)).status == 401
    assert [e.actor for e in audit.events] == ["unauthenticated"] * 4
    assert SECRET not in repr(audit.events)


async def test_without_either_credential_sync_is_503_and_a_webhook_secret_alone_still_syncs() -> None:
    for access, signed_status in [
        (AdminAccess(operator=None, reader=None, open_reads="loopback"), 503),
        (AdminAccess(operator=None, reader=None, open_reads="loopback", webhook_secret=SECRET), 200),
    ]:
        app = web.Application(middlewares=[access.middleware])
        app.router.add_post("/sync", access.operator_or_webhook(sync))
        async with TestClient(TestServer(app)) as client:
            response = await client.post("/sync", data=b"{}", headers={"X-Hub-Signature-256": WebhookSignature(SECRET).sign(b"{}")})
            assert response.status == signed_status
