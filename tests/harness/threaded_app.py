"""An aiohttp application served on a loopback port from a thread of its own, so a
synchronous test can run a small real HTTP endpoint (a JWKS, a token exchange) beside it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from aiohttp import web

from .ports import free_port


class ThreadedApp:
    def __init__(self, routes: Callable[[web.Application], object], *, name: str) -> None:
        self.port = free_port()
        self._routes = routes
        self._name = name
        self._ready = threading.Event()
        self._stop: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True, name=name)

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(10):
            raise TimeoutError(f"{self._name} did not start")

    def stop(self) -> None:
        """Closes the port: the endpoint is down from then on."""
        if self._stop is not None:
            loop, event = self._stop
            loop.call_soon_threadsafe(event.set)
            self._thread.join(timeout=5)
            self._stop = None

    def _serve(self) -> None:
        async def main() -> None:
            app = web.Application()
            self._routes(app)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", self.port).start()
            stop = asyncio.Event()
            self._stop = (asyncio.get_running_loop(), stop)
            self._ready.set()
            await stop.wait()
            await runner.cleanup()

        asyncio.run(main())
