"""A small RFC 8693 token-exchange endpoint, as a real HTTP server on loopback (a thread).

POST /token with ``grant_type=urn:ietf:params:oauth:grant-type:token-exchange``,
``subject_token``, ``subject_token_type`` and ``audience`` answers 200 with
``{access_token, issued_token_type, token_type, expires_in}``; anything else 400
``invalid_request`` (RFC 6749 §5.2). Each request's form is kept in ``requests`` so a test
can see what the gateway sent; ``stop`` closes the port (the endpoint is then down).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from aiohttp import web

from .ports import free_port

GRANT_TYPE = "urn:ietf:params:oauth:grant-type:token-exchange"
SUBJECT_TYPES = ("urn:ietf:params:oauth:token-type:jwt", "urn:ietf:params:oauth:token-type:access_token")


class TokenExchangeServer:
    def __init__(self, *, expires_in: int = 300) -> None:
        self.port = free_port()
        self.expires_in = expires_in
        self.requests: list[dict[str, str]] = []
        self._ready = threading.Event()
        self._stop: Any = None
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/token"

    def start(self) -> TokenExchangeServer:
        self._thread.start()
        if not self._ready.wait(10):
            raise TimeoutError("token exchange server did not start")
        return self

    async def _token(self, request: web.Request) -> web.Response:
        form = {k: str(v) for k, v in (await request.post()).items()}
        self.requests.append(form)
        if form.get("grant_type") != GRANT_TYPE or form.get("subject_token_type") not in SUBJECT_TYPES or not form.get("subject_token"):
            return web.json_response({"error": "invalid_request"}, status=400)
        issued = f"exchanged-{len(self.requests)}-for-{form.get('audience', '')}"
        return web.json_response(
            {
                "access_token": issued,
                "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
                "token_type": "Bearer",
                "expires_in": self.expires_in,
            },
            headers={"cache-control": "no-store"},
        )

    def _serve(self) -> None:
        async def main() -> None:
            app = web.Application()
            app.router.add_post("/token", self._token)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", self.port).start()
            stop = asyncio.Event()
            self._stop = (asyncio.get_running_loop(), stop)
            self._ready.set()
            await stop.wait()
            await runner.cleanup()

        asyncio.run(main())

    def stop(self) -> None:
        if self._stop is not None:
            loop, event = self._stop
            loop.call_soon_threadsafe(event.set)
            self._thread.join(timeout=5)
            self._stop = None
