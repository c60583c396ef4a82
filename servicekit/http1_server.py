"""A lean HTTP/1.1 server for one kind of caller: Envoy's HTTP ext_authz client.

Envoy sends one small request at a time per connection (no pipelining, no body unless
the route's check asks for it) and keeps connections alive. So this is an ``asyncio.Protocol`` with the
httptools parser and nothing else: no routing, no middleware, no request object beyond
method, path and headers. bench/authz_transports.py chose it: 27-33 µs of CPU per check
under uvloop, against 113-131 µs for aiohttp's low-level server and 211-234 µs for h11.

A handler is a coroutine function ``(Request) -> bytes`` (a whole response, see
``response``), run as a task of its own: redis-py's timeouts need one, and each check's
log context stays its own. (Running it eagerly, without a task, until its first wait
broke both.) Requests on one connection are answered in order.

Limits: headers above ``max_header_bytes`` get 431 and the connection is closed; a body
(Envoy sends one only for routes whose check needs it: request validation) above
``max_body_bytes``, by its ``content-length`` up front or by the bytes read (chunked), gets
413 and the connection is closed, so at most that much is held per request; a
connection idle for ``idle_timeout`` is closed; a handler that raises is answered 500
(Envoy then applies its ``status_on_error``). Several processes may bind the same port
(``reuse_port``) and the kernel spreads connections across them.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import httptools
import structlog

log = structlog.get_logger(component="http1")

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 1024 * 1024 + 64 * 1024
"""Above the largest body a route may have Envoy buffer for its check (1 MiB)."""
IDLE_TIMEOUT = 300.0


@dataclass(slots=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    """Lower-case names; a repeated header keeps its last value (Envoy never repeats one)."""
    body: bytes = b""


Handler = Callable[[Request], Coroutine[Any, Any, bytes]]


def response(status: int, headers: list[tuple[str, str]] | tuple[tuple[str, str], ...] = (), body: bytes = b"") -> bytes:
    """A whole HTTP/1.1 response; build constant ones once and reuse the bytes."""
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}"]
    lines.extend(f"{name}: {value}" for name, value in headers)
    lines.append(f"content-length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


_HEADERS_TOO_LARGE = response(431, (("connection", "close"),))
_BODY_TOO_LARGE = response(413, (("connection", "close"),))
_BAD_REQUEST = response(400, (("connection", "close"),))
_FAILED = response(500, (("content-type", "text/plain"),), b"the check failed\n")


class _Connection(asyncio.Protocol):
    __slots__ = (
        "_server", "_transport", "_parser", "_url", "_headers", "_header_bytes", "_name",
        "_queue", "_busy", "_closing", "last_active", "_paused", "_body", "_body_bytes",
    )

    def __init__(self, server: Http1Server) -> None:
        self._server = server
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        self._url = b""
        self._headers: dict[str, str] = {}
        self._header_bytes = 0
        self._name = b""
        self._queue: collections.deque[tuple[Request, bool]] = collections.deque()
        self._busy = False
        self._closing = False
        self._paused = False
        self._body: list[bytes] = []
        self._body_bytes = 0
        self.last_active = time.monotonic()

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport subclass
        self._server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.connections.discard(self)
        self._transport = None
        self._queue.clear()

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._reply(_BAD_REQUEST, keep_alive=False)
        except httptools.HttpParserError:
            self._reply(_BAD_REQUEST, keep_alive=False)

    def pause_writing(self) -> None:
        # The peer reads slower than we answer: stop reading until the buffer drains.
        if self._transport is not None:
            self._transport.pause_reading()
            self._paused = True

    def resume_writing(self) -> None:
        if self._transport is not None and self._paused:
            self._paused = False
            self._transport.resume_reading()

    # -- httptools callbacks ----------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = {}
        self._header_bytes = 0
        self._body = []
        self._body_bytes = 0

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._header_bytes += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value)
        if self._header_bytes > self._server.max_header_bytes:
            self._reply(_HEADERS_TOO_LARGE, keep_alive=False)
            raise httptools.HttpParserError("headers too large")
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        length = self._headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self._server.max_body_bytes:
            self._reply(_BODY_TOO_LARGE, keep_alive=False)
            raise httptools.HttpParserError("body too large")

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        if self._body_bytes > self._server.max_body_bytes:
            self._reply(_BODY_TOO_LARGE, keep_alive=False)
            raise httptools.HttpParserError("body too large")
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self._closing:
            return
        method = self._parser.get_method().decode("ascii", "replace")
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        request = Request(method, self._url.decode("latin-1"), self._headers, body)
        keep_alive = bool(self._parser.should_keep_alive())
        if self._busy:
            self._queue.append((request, keep_alive))
        else:
            self._dispatch(request, keep_alive)

    # -- answering --------------------------------------------------------------------

    def _dispatch(self, request: Request, keep_alive: bool) -> None:
        self._busy = True
        loop = self._server.loop
        assert loop is not None
        task = loop.create_task(self._server.handler(request))
        task.add_done_callback(lambda done: self._finished(done, keep_alive))

    def _finished(self, done: asyncio.Future[bytes], keep_alive: bool) -> None:
        self._busy = False
        if done.cancelled():
            return
        error = done.exception()
        if error is not None:
            log.error("http1_handler_failed", error=repr(error))
        self._reply(_FAILED if error is not None else done.result(), keep_alive)
        while self._queue and not self._busy and self._transport is not None:
            request, more = self._queue.popleft()
            self._dispatch(request, more)

    def _reply(self, data: bytes, keep_alive: bool) -> None:
        transport = self._transport
        if transport is None or self._closing:
            return
        transport.write(data)
        if not keep_alive:
            self._closing = True
            transport.close()

    def close_if_idle(self, before: float) -> None:
        if not self._busy and self.last_active < before:
            self.close()

    def close(self) -> None:
        if self._transport is not None:
            self._closing = True
            self._transport.close()


class Http1Server:
    """``await start()`` binds (``reuse_port``: several processes may share the port);
    ``await stop()`` stops accepting, then closes every connection."""

    def __init__(
        self,
        address: str,
        handler: Handler,
        *,
        max_header_bytes: int = MAX_HEADER_BYTES,
        max_body_bytes: int = MAX_BODY_BYTES,
        idle_timeout: float = IDLE_TIMEOUT,
        reuse_port: bool = True,
        backlog: int = 1024,
    ) -> None:
        host, _, port = address.rpartition(":")
        self.host, self.port = host.strip("[]"), int(port)
        self.handler = handler
        self.max_header_bytes = max_header_bytes
        self.max_body_bytes = max_body_bytes
        self.idle_timeout = idle_timeout
        self.connections: set[_Connection] = set()
        self._reuse_port = reuse_port
        self._backlog = backlog
        self._server: asyncio.Server | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self) -> None:
        loop = self.loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(
                lambda: _Connection(self), self.host, self.port, reuse_port=self._reuse_port, backlog=self._backlog
            )
        except OSError as exc:
            raise OSError(f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc}") from exc
        if self.port == 0:
            self.port = self._server.sockets[0].getsockname()[1]
        self._sweeper = asyncio.create_task(self._sweep(), name="http1-idle")

    async def _sweep(self) -> None:
        period = max(0.05, self.idle_timeout / 4)
        while True:
            await asyncio.sleep(period)
            before = time.monotonic() - self.idle_timeout
            for connection in list(self.connections):
                connection.close_if_idle(before)

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is not None:
            self._server.close()
            for connection in list(self.connections):
                connection.close()
            await self._server.wait_closed()

