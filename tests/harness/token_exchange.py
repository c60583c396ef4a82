"""A small RFC 8693 token-exchange endpoint, as a real HTTP server on loopback (a thread).

POST /token with ``grant_type=urn:ietf:params:oauth:grant-type:token-exchange``,
``subject_token``, ``subject_token_type`` and ``audience`` answers 200 with
``{access_token, issued_token_type, token_type, expires_in}``; anything else 400
``invalid_request`` (RFC 6749 §5.2). Each request's form is kept in ``requests`` so a test
can see what the gateway sent; ``delay`` (seconds) holds every answer back, for a slow
endpoint; ``stop`` closes the port (the endpoint is then down).
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from .threaded_app import ThreadedApp

GRANT_TYPE = "urn:ietf:params:oauth:grant-type:token-exchange"
SUBJECT_TYPES = ("urn:ietf:params:oauth:token-type:jwt", "urn:ietf:params:oauth:token-type:access_token")


class TokenExchangeServer:
    def __init__(self, *, expires_in: int = 300, delay: float = 0.0) -> None:
        self.expires_in = expires_in
        self.delay = delay
        self.requests: list[dict[str, str]] = []
        self._app = ThreadedApp(lambda app: app.router.add_post("/token", self._token), name="token exchange server")
        self.port = self._app.port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/token"

    def start(self) -> TokenExchangeServer:
        self._app.start()
        return self

    async def _token(self, request: web.Request) -> web.Response:
        form = {k: str(v) for k, v in (await request.post()).items()}
        self.requests.append(form)
        await asyncio.sleep(self.delay)
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

    def stop(self) -> None:
        """Closes the port: the endpoint is down from then on."""
        self._app.stop()
