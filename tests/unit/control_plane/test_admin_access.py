"""control_plane/admin_access.py's decisions, each from the request alone (the process
tests are tests/integration/test_admin_access.py): which peers read without a credential,
which requests come from a browser's other site, which Host a rebinding page would send,
and that a Basic password reads but never writes."""

from __future__ import annotations

import base64
from unittest import mock

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from multidict import CIMultiDict

from control_plane.admin_access import AdminAccess, cross_site, peer_may_read
from servicekit.audit import MemoryAuditSink
from servicekit.bearer import BearerCheck

OPERATOR, READER = "o" * 32, "r" * 32


@pytest.mark.parametrize(
    ("peer", "policy", "open_"),
    [
        ("127.0.0.1", "loopback", True),
        ("127.3.4.5", "loopback", True),
        ("::1", "loopback", True),
        ("::ffff:127.0.0.1", "loopback", True),
        ("10.1.2.3", "loopback", False),
        ("10.1.2.3", "private", True),
        ("192.168.1.9", "private", True),
        ("fd00::1", "private", True),
        ("fe80::1%eth0", "private", True),
        ("93.184.216.34", "private", False),
        ("::ffff:93.184.216.34", "private", False),
        ("2606:4700::1", "private", False),
        ("127.0.0.1", "never", False),
        (None, "loopback", False),
        ("", "private", False),
    ],
)
def test_the_peer_address_opens_reads_only_as_the_policy_says(peer: str | None, policy: str, open_: bool) -> None:
    assert peer_may_read(peer, policy) is open_  # type: ignore[arg-type]


def request(method: str, path: str = "/sync", host: str = "127.0.0.1:19000", peer: str = "127.0.0.1", **headers: str) -> web.Request:
    """Headers as keywords: ``Sec_Fetch_Site`` is ``Sec-Fetch-Site``; from ``peer``."""
    fields = CIMultiDict({"Host": host, **{k.replace("_", "-"): v for k, v in headers.items()}})
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (peer, 40000) if name == "peername" else default
    return make_mocked_request(method, path, headers=fields, transport=transport)


@pytest.mark.parametrize(
    ("method", "headers", "refused"),
    [
        ("POST", {}, False),  # curl, a webhook, the CLI: no browser headers
        ("POST", {"Origin": "http://127.0.0.1:19000", "Sec-Fetch-Site": "same-origin"}, False),
        ("POST", {"Origin": "HTTP://127.0.0.1:19000"}, False),
        ("POST", {"Origin": "http://attacker.example"}, True),
        ("POST", {"Origin": "null"}, True),
        ("POST", {"Origin": "http://127.0.0.1:19001"}, True),
        ("POST", {"Sec-Fetch-Site": "cross-site"}, True),
        ("POST", {"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:19000"}, True),
        ("POST", {"Sec-Fetch-Site": "none", "Origin": "http://127.0.0.1:19000"}, True),
        ("POST", {"Sec-Fetch-Site": "same-origin"}, True),  # a browser's write always has an Origin
        ("GET", {"Sec-Fetch-Site": "none"}, False),  # typed or bookmarked
        ("GET", {"Sec-Fetch-Site": "same-origin"}, False),
        ("GET", {"Sec-Fetch-Site": "cross-site"}, True),
        ("GET", {"Origin": "http://attacker.example"}, True),
    ],
)
def test_a_browsers_other_site_is_told_apart(method: str, headers: dict[str, str], refused: bool) -> None:
    assert (cross_site(request(method, **headers)) is not None) is refused


async def answer(access: AdminAccess, req: web.Request) -> int:
    async def handler(_: web.Request) -> web.StreamResponse:
        return web.Response(text="served")

    return (await access.middleware(req, handler)).status


def basic(password: str) -> str:
    return "Basic " + base64.b64encode(f"me:{password}".encode()).decode()


async def test_reads_open_to_the_peers_the_policy_names_and_to_browsers_naming_an_address_only() -> None:
    access = AdminAccess(operator=OPERATOR, reader=READER, open_reads="loopback")
    assert await answer(access, request("GET", "/config")) == 200
    assert await answer(access, request("GET", "/config", peer="10.0.0.7")) == 401
    assert await answer(AdminAccess(operator=None, reader=READER, open_reads="private"), request("GET", "/config", peer="10.0.0.7")) == 200
    assert await answer(access, request("GET", "/config", host="localhost:19000", Sec_Fetch_Site="same-origin")) == 200
    assert await answer(access, request("GET", "/config", host="[::1]:19000", Sec_Fetch_Site="same-origin")) == 200
    assert await answer(access, request("GET", "/config", host="rebound.example:19000", Sec_Fetch_Site="same-origin")) == 401
    old_browser = {"User_Agent": "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) Safari/605.1.15"}  # no Sec-Fetch-*
    assert await answer(access, request("GET", "/config", host="rebound.example:19000", **old_browser)) == 401
    assert await answer(access, request("GET", "/config", host="rebound.example:19000", User_Agent="curl/8.5.0")) == 200
    rebound = request("GET", "/config", host="rebound.example:19000", Sec_Fetch_Site="same-origin", Authorization=basic(READER))
    assert await answer(access, rebound) == 200


async def test_closed_reads_take_either_credential_in_either_scheme_and_say_so_when_none_exists() -> None:
    access = AdminAccess(operator=OPERATOR, reader=READER, open_reads="never")
    assert await answer(access, request("GET", "/status")) == 401
    for authorization in (f"Bearer {READER}", f"Bearer {OPERATOR}", basic(READER), basic(OPERATOR)):
        assert await answer(access, request("GET", "/status", Authorization=authorization)) == 200, authorization
    for wrong in (f"Bearer {READER}x", basic(READER + "x"), "Basic !!!", f"Digest {READER}"):
        assert await answer(access, request("GET", "/status", Authorization=wrong)) == 401, wrong
    assert await answer(access, request("GET", "/healthz")) == 200, "probes need nothing"
    nobody = AdminAccess(operator=None, reader=None, open_reads="never")
    assert await answer(nobody, request("GET", "/status")) == 503


async def test_a_write_takes_the_operator_bearer_alone_and_audits_refusals() -> None:
    audit = MemoryAuditSink()
    access = AdminAccess(operator=OPERATOR, reader=READER, open_reads="loopback", audit=audit)

    async def sync(_: web.Request) -> web.StreamResponse:
        return web.Response(text="synced")

    guarded = access.operator_only(sync)
    assert (await guarded(request("POST", Authorization=f"Bearer {OPERATOR}"))).status == 200
    for refused in (None, f"Bearer {READER}", basic(OPERATOR), f"bearer{OPERATOR}"):
        headers = {"Authorization": refused} if refused else {}
        assert (await guarded(request("POST", **headers))).status == 401, refused
    assert [e.actor for e in audit.events] == ["unauthenticated"] * 4
    assert OPERATOR not in repr(audit.events)
    assert (await AdminAccess(operator=None, reader=None, open_reads="loopback").operator_only(sync)(request("POST"))).status == 503
    assert await answer(access, request("POST", Origin="http://attacker.example")) == 403
    assert audit.events[-1].actor == "cross_site"


def test_basic_carries_the_credential_as_its_password_only() -> None:
    check = BearerCheck(READER)
    assert check.allows_basic(basic(READER)) and check.allows_basic("basic " + base64.b64encode(f":{READER}".encode()).decode())
    assert not check.allows_basic(f"Bearer {READER}") and not check.allows(basic(READER))
    assert not check.allows_basic("Basic " + base64.b64encode(READER.encode()).decode()), "no colon: no password"
    assert not check.allows_basic(None) and not check.allows_basic("Basic")
