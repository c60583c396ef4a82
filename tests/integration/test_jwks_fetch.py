"""IssuerKeys against a real HTTP server (aiohttp.web on 127.0.0.1, a free port) that serves
a JWKS with a configurable Cache-Control, can fail (500, slow, not JSON, too big), answers
If-None-Match, and counts requests."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from ext_authz.errors import TokenError
from ext_authz.tokens.jwks import IssuerKeys
from ext_authz.tokens.verifier import TokenVerifier
from tests.unit.ext_authz.signing import FakeClock, claims, ec_key, issuer, rsa_key


@dataclass
class JwksServer:
    keys: list[dict[str, Any]] = field(default_factory=lambda: [rsa_key().jwk()])
    cache_control: str | None = "max-age=600"
    status: int = 200
    delay: float = 0.0
    body: bytes | None = None
    etag: str | None = None
    requests: int = 0
    conditional: int = 0
    url: str = ""
    runner: web.AppRunner | None = None

    async def stop(self) -> None:
        if self.runner is not None:
            runner, self.runner = self.runner, None
            await runner.cleanup()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        headers = {"Cache-Control": self.cache_control} if self.cache_control else {}
        if self.etag:
            headers["ETag"] = self.etag
            if request.headers.get("If-None-Match") == self.etag:
                self.conditional += 1
                return web.Response(status=304, headers=headers)
        if self.status != 200:
            return web.Response(status=self.status, text="down")
        if self.body is not None:
            return web.Response(body=self.body, headers=headers, content_type="application/json")
        return web.json_response({"keys": self.keys}, headers=headers)


@pytest.fixture
async def server() -> AsyncIterator[JwksServer]:
    state = JwksServer()
    app = web.Application()
    app.router.add_get("/jwks.json", state.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    state.url = f"http://127.0.0.1:{port}/jwks.json"
    state.runner = runner
    yield state
    await state.stop()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def keys_for(server: JwksServer, session: aiohttp.ClientSession, clock: FakeClock | None = None, **fields: Any) -> IssuerKeys:
    config = issuer(jwksUrl=server.url, **fields)
    if clock is None:
        return IssuerKeys.from_config(config, session=session)
    return IssuerKeys.from_config(config, session=session, clock=clock)


@pytest.mark.parametrize(
    ("cache_control", "ttl"),
    [("max-age=600", 600.0), ("public, max-age=5", 300.0), ("max-age=99999999", 86_400.0), (None, 300.0), ("no-store", 300.0)],
)
async def test_cache_control_sets_a_clamped_ttl(
    server: JwksServer, session: aiohttp.ClientSession, cache_control: str | None, ttl: float
) -> None:
    server.cache_control = cache_control
    clock = FakeClock(50.0)
    keys = keys_for(server, session, clock)
    assert await keys.refresh()
    assert keys.expires_at == 50.0 + ttl
    assert keys.kids == {"rsa-1"} and server.requests == 1


async def test_rotation_is_picked_up_on_an_unknown_kid_without_restart(
    server: JwksServer, session: aiohttp.ClientSession
) -> None:
    keys = keys_for(server, session)
    await keys.start()
    try:
        verifier = TokenVerifier([keys], cache_size=100, max_token_bytes=8192)
        now = int(time.time())
        fresh = {"iat": now, "nbf": now, "exp": now + 600}
        assert (await verifier.verify(f"Bearer {rsa_key().sign(claims(**fresh))}")).subject == "user-1"
        assert server.requests == 1
        new = rsa_key("rsa-2")
        server.keys = [new.jwk()]  # the IdP rotates: rsa-1 gone, rsa-2 in
        token = new.sign(claims(sub="rotated", **fresh))
        assert (await verifier.verify(f"Bearer {token}")).subject == "rotated"
        assert server.requests == 2 and keys.kids == {"rsa-2"}
        # The rotated-out key no longer verifies, and (cooldown) asks the server nothing more.
        with pytest.raises(TokenError) as info:
            await verifier.verify(f"Bearer {rsa_key().sign(claims(sub='old', **fresh))}")
        assert info.value.reason == "unknown_kid" and server.requests == 2
    finally:
        await keys.close()


async def test_a_flood_of_random_kids_makes_one_request(server: JwksServer, session: aiohttp.ClientSession) -> None:
    keys = keys_for(server, session)
    assert await keys.refresh()
    server.delay = 0.2  # the refetch is in flight while the flood arrives
    flood = [keys.key_for(secrets.token_urlsafe(16), "RS256") for _ in range(300)]
    results = await asyncio.gather(*flood, return_exceptions=True)
    assert all(isinstance(r, TokenError) and r.reason == "unknown_kid" for r in results)
    assert server.requests == 2


@pytest.mark.parametrize("failure", ["500", "timeout", "not-json", "too-big", "no-usable-keys", "refused"])
async def test_a_failed_fetch_keeps_the_good_keys(
    server: JwksServer, session: aiohttp.ClientSession, failure: str
) -> None:
    keys = keys_for(server, session, jwks={"timeout": "200ms"})
    assert await keys.refresh()
    if failure == "500":
        server.status = 500
    elif failure == "timeout":
        server.delay = 2.0
    elif failure == "not-json":
        server.body = b"<html>oops</html>"
    elif failure == "too-big":
        # Valid, with a usable key, but over the 1 MiB bound: refused, never parsed.
        server.body = json.dumps({"keys": [rsa_key("rsa-2").jwk()], "padding": "x" * (1 << 21)}).encode()
    elif failure == "no-usable-keys":
        server.keys = [{"kty": "oct", "k": "c2VjcmV0", "kid": "rsa-1"}]
    else:
        await server.stop()  # connection refused
    started = time.monotonic()
    assert not await keys.refresh()
    assert time.monotonic() - started < 1.5  # the timeout bounds every fetch
    assert keys.fetch_errors == 1 and keys.has_keys
    assert (await keys.key_for("rsa-1", "RS256")).key_id == "rsa-1"


async def test_an_etag_revalidates_without_reloading(server: JwksServer, session: aiohttp.ClientSession) -> None:
    server.etag = '"v1"'
    clock = FakeClock(0.0)
    keys = keys_for(server, session, clock)
    assert await keys.refresh()
    clock.advance(500)
    server.keys = []  # would be a failure if it were sent; a 304 sends nothing
    assert await keys.refresh()
    assert server.conditional == 1 and keys.kids == {"rsa-1"}
    assert keys.expires_at == 500 + 600


async def test_the_background_task_refreshes_with_real_time(server: JwksServer, session: aiohttp.ClientSession) -> None:
    server.cache_control = "max-age=0"
    keys = keys_for(server, session, jwks={"minTtl": "100ms", "maxTtl": "1s"})
    await keys.start()
    try:
        server.keys = [rsa_key().jwk(), ec_key().jwk()]
        deadline = time.monotonic() + 3
        while keys.kids != {"rsa-1", "ec-1"} and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert keys.kids == {"rsa-1", "ec-1"} and server.requests >= 2
    finally:
        await keys.close()
    settled = server.requests
    await asyncio.sleep(0.3)
    assert server.requests == settled  # close() stopped it


async def test_a_slow_fetch_never_blocks_the_event_loop(server: JwksServer, session: aiohttp.ClientSession) -> None:
    server.delay = 0.5
    keys = keys_for(server, session)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    try:
        assert await keys.refresh()
    finally:
        task.cancel()
    assert ticks >= 20  # ~50 possible in 0.5 s; a blocking fetch would give 0
