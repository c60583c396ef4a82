"""The HTTP side every Gatehouse service exposes: /healthz, /readyz, /metrics, plus its own.

aiohttp, because the services are asyncio processes and this must not take a thread or
block the loop; prometheus-client renders the metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

Readiness = Callable[[], tuple[bool, str]]


class AdminServer:
    """Port 0 binds an ephemeral port (``port`` after ``start``); ``reuse_port`` lets the
    workers of one service share an address (servicekit/workers.py)."""

    def __init__(
        self,
        address: str,
        *,
        readiness: Readiness,
        routes: list[web.RouteDef] | None = None,
        reuse_port: bool = False,
        middlewares: Sequence[Middleware] = (),
    ) -> None:
        host, _, port = address.rpartition(":")
        self._host = host.strip("[]") or "127.0.0.1"
        self.port = int(port)
        self._reuse_port = reuse_port
        self._readiness = readiness
        # A service's access policy for its own routes (the control plane's admin_access).
        app = web.Application(middlewares=list(middlewares))
        app.add_routes(
            [
                web.get("/healthz", self._healthz),
                web.get("/readyz", self._readyz),
                web.get("/metrics", self._metrics),
                *(routes or []),
            ]
        )
        self._runner = web.AppRunner(app, access_log=None)

    async def start(self) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self.port, reuse_address=True, reuse_port=self._reuse_port or None)
        await site.start()
        if self.port == 0:
            self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        await self._runner.cleanup()

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _: web.Request) -> web.Response:
        ready, reason = self._readiness()
        return web.Response(status=200 if ready else 503, text=f"{reason}\n")

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST})
