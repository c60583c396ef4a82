"""The authorization servers ``bench.authz_transports`` compares, each run as its own process:

    python -m bench.standins.authz_servers KIND 127.0.0.1:PORT [--dump FILE]

KIND is ``asyncio_raw``, ``uvloop_raw`` (a minimal hand parser: a lower bound),
``asyncio_httptools``, ``uvloop_httptools``, ``uvloop_h11``, ``aiohttp_lowlevel``,
``aiohttp_lowlevel_uvloop``, ``grpc_aio`` (an Authorization servicer), or ``probe`` (logs
every connection and request head to ``--dump`` as JSON lines and answers by the path's
last segment). Each one reads the check's method, path and ``authorization`` header and
answers 200 with ``x-user-id: alice`` when the header starts with ``Bearer `` (401
otherwise); keep-alive unless the request says ``connection: close``. Each factory imports
only what its kind needs, so every process carries only its own stack.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

PROBE_SLOW_S = 0.6
"""The probe's ``slow`` case answers after this long (``authz_transports`` sets a shorter timeout)."""

OK_RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nx-user-id: alice\r\n\r\n"
DENY_RESPONSE = b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\nwww-authenticate: Bearer\r\n\r\n"
BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
MAX_HEAD = 64 * 1024


def allowed(method: bytes, path: bytes | None, authorization: bytes | None) -> bool:
    """The whole 'policy': a bearer token on a check request (method and path are read, as a
    real policy would, but any method passes)."""
    return bool(method) and path is not None and path.startswith(b"/") and authorization is not None and authorization.startswith(b"Bearer ")


def _raw_protocol() -> type[asyncio.Protocol]:
    class RawProtocol(asyncio.Protocol):
        """A minimal HTTP/1.1 request parser by hand: request line, headers, Content-Length body
        skipped, keep-alive. A lower bound for what parsing costs in Python, not production code."""

        def connection_made(self, transport: Any) -> None:
            self.transport = transport
            self.buffer = b""

        def data_received(self, data: bytes) -> None:
            buffer = self.buffer + data if self.buffer else data
            out = []
            close = False
            while True:
                end = buffer.find(b"\r\n\r\n")
                if end < 0:
                    if len(buffer) > MAX_HEAD:
                        out.append(BAD_REQUEST)
                        close = True
                    break
                lines = buffer[:end].split(b"\r\n")
                parts = lines[0].split(b" ")
                if len(parts) != 3:
                    out.append(BAD_REQUEST)
                    close = True
                    break
                method, path, version = parts
                authorization = None
                length = 0
                close = version != b"HTTP/1.1"
                bad = False
                for line in lines[1:]:
                    name, _, value = line.partition(b":")
                    name = name.lower()
                    if name == b"authorization":
                        authorization = value.strip()
                    elif name == b"content-length":
                        try:
                            length = int(value)
                        except ValueError:
                            bad = True
                    elif name == b"connection":
                        close = value.strip().lower() == b"close"
                    elif name == b"transfer-encoding":
                        bad = True  # not needed for Envoy's check requests
                if bad:
                    out.append(BAD_REQUEST)
                    close = True
                    break
                total = end + 4 + length
                if len(buffer) < total:
                    break  # wait for the body
                buffer = buffer[total:]
                out.append(OK_RESPONSE if allowed(method, path, authorization) else DENY_RESPONSE)
                if close:
                    break
            self.buffer = buffer
            if out:
                self.transport.write(b"".join(out) if len(out) > 1 else out[0])
            if close:
                self.transport.close()

    return RawProtocol


def _httptools_protocol() -> type[asyncio.Protocol]:
    import httptools

    class HttptoolsProtocol(asyncio.Protocol):
        """asyncio.Protocol + httptools' llhttp parser; the response is constant bytes."""

        def connection_made(self, transport: Any) -> None:
            self.transport = transport
            self.parser = httptools.HttpRequestParser(self)
            self.url: bytes | None = None
            self.authorization: bytes | None = None

        def data_received(self, data: bytes) -> None:
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserUpgrade:
                self.transport.write(BAD_REQUEST)
                self.transport.close()
            except httptools.HttpParserError:
                self.transport.write(BAD_REQUEST)
                self.transport.close()

        # parser callbacks
        def on_message_begin(self) -> None:
            self.url = None
            self.authorization = None

        def on_url(self, url: bytes) -> None:
            self.url = url if self.url is None else self.url + url

        def on_header(self, name: bytes, value: bytes) -> None:
            if len(name) == 13 and name.lower() == b"authorization":
                self.authorization = value

        def on_message_complete(self) -> None:
            ok = allowed(self.parser.get_method(), self.url, self.authorization)
            self.transport.write(OK_RESPONSE if ok else DENY_RESPONSE)
            if not self.parser.should_keep_alive():
                self.transport.close()

    return HttptoolsProtocol


def _h11_protocol() -> type[asyncio.Protocol]:
    import h11

    ok_headers = [(b"content-length", b"0"), (b"x-user-id", b"alice")]
    deny_headers = [(b"content-length", b"0"), (b"www-authenticate", b"Bearer")]

    class H11Protocol(asyncio.Protocol):
        """asyncio.Protocol + h11: h11 parses the request and serializes the response."""

        def connection_made(self, transport: Any) -> None:
            self.transport = transport
            self.conn = h11.Connection(h11.SERVER)
            self.ok = False

        def data_received(self, data: bytes) -> None:
            conn = self.conn
            conn.receive_data(data)
            out = []
            while True:
                try:
                    event = conn.next_event()
                except h11.RemoteProtocolError:
                    out.append(BAD_REQUEST)
                    self.transport.write(b"".join(out))
                    self.transport.close()
                    return
                if event is h11.NEED_DATA or event is h11.PAUSED:
                    break
                if isinstance(event, h11.Request):
                    authorization = None
                    for name, value in event.headers:  # names are lowercased by h11
                        if name == b"authorization":
                            authorization = value
                    self.ok = allowed(event.method, event.target, authorization)
                elif isinstance(event, h11.EndOfMessage):
                    if self.ok:
                        out.append(conn.send(h11.Response(status_code=200, headers=ok_headers)))
                    else:
                        out.append(conn.send(h11.Response(status_code=401, headers=deny_headers)))
                    out.append(conn.send(h11.EndOfMessage()))
                    if conn.our_state is h11.MUST_CLOSE:
                        self.transport.write(b"".join(out))
                        self.transport.close()
                        return
                    conn.start_next_cycle()
                elif isinstance(event, h11.ConnectionClosed):
                    break
            if out:
                self.transport.write(b"".join(out))

    return H11Protocol


_ALLOW = (b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nx-user-id: alice\r\nx-not-allowed: leaked\r\n"
          b"x-client-visible: maybe\r\nset-cookie: s=1\r\n\r\n")
_EXPIRED = b"token expired"
PROBE_ANSWERS = {
    "allow": _ALLOW,
    "keepalive": _ALLOW,
    "allow-nouser": b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
    "allow-close": b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nx-user-id: alice\r\nconnection: close\r\n\r\n",
    "allow-body": b"HTTP/1.1 200 OK\r\ncontent-length: 7\r\nx-user-id: alice\r\n\r\nignored",
    "status204": b"HTTP/1.1 204 No Content\r\nx-user-id: alice\r\n\r\n",
    "status302": b"HTTP/1.1 302 Found\r\ncontent-length: 0\r\nlocation: https://login.example/\r\nx-reason: login\r\n\r\n",
    "deny401": (b"HTTP/1.1 401 Unauthorized\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n"
                b"www-authenticate: Bearer realm=\"gatehouse\", error=\"invalid_token\"\r\nx-reason: expired\r\n\r\n%s" % (len(_EXPIRED), _EXPIRED)),
    "deny403": b"HTTP/1.1 403 Forbidden\r\ncontent-length: 9\r\nx-reason: scope\r\n\r\nforbidden",
    "status500": b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 4\r\n\r\nboom",
}
"""What the probe answers, by the check path's last segment (``slow``: OK after PROBE_SLOW_S;
anything else: OK)."""


def _probe_protocol(dump: Path) -> type[asyncio.Protocol]:
    """The probe's server: logs every connection and raw request head (JSON lines) and answers
    by the path's last segment."""
    log = open(dump, "a", buffering=1)  # noqa: SIM115 - lives as long as the process

    def answer(path: str) -> tuple[bytes, float]:
        case = path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        return PROBE_ANSWERS.get(case, OK_RESPONSE), PROBE_SLOW_S if case == "slow" else 0.0

    class ProbeProtocol(asyncio.Protocol):
        def connection_made(self, transport: Any) -> None:
            self.transport = transport
            self.buffer = b""
            self.peer = transport.get_extra_info("peername")
            log.write(json.dumps({"event": "connect", "peer": list(self.peer)}) + "\n")

        def connection_lost(self, exc: Exception | None) -> None:
            log.write(json.dumps({"event": "close", "peer": list(self.peer)}) + "\n")

        def data_received(self, data: bytes) -> None:
            self.buffer += data
            while True:
                end = self.buffer.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = self.buffer[:end].decode("latin-1")
                length = 0
                for line in head.split("\r\n")[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                if len(self.buffer) < end + 4 + length:
                    return
                body = self.buffer[end + 4:end + 4 + length]
                self.buffer = self.buffer[end + 4 + length:]
                path = head.split(" ", 2)[1]
                log.write(json.dumps({"event": "request", "peer": list(self.peer), "head": head, "body": body.decode("latin-1")}) + "\n")
                response, delay = answer(path)
                close = b"connection: close" in response
                if delay:
                    asyncio.get_running_loop().call_later(delay, self.reply, response, close)
                else:
                    self.reply(response, close)

        def reply(self, response: bytes, close: bool) -> None:
            if self.transport.is_closing():
                log.write(json.dumps({"event": "reply-on-closed", "peer": list(self.peer)}) + "\n")
                return
            self.transport.write(response)
            if close:
                self.transport.close()

    return ProbeProtocol


def run(main: Coroutine[Any, Any, None], use_uvloop: bool) -> None:
    """``main`` on uvloop (imported only then) or on the standard library's loop."""
    if use_uvloop:
        import uvloop

        uvloop.run(main)
    else:
        asyncio.run(main)


def serve_protocol(kind: str, port: int, use_uvloop: bool, dump: Path | None) -> None:
    factory: Any
    if kind == "raw":
        factory = _raw_protocol()
    elif kind == "httptools":
        factory = _httptools_protocol()
    elif kind == "h11":
        factory = _h11_protocol()
    elif kind == "probe":
        assert dump is not None
        factory = _probe_protocol(dump)
    else:
        raise SystemExit(f"unknown protocol {kind}")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(factory, "127.0.0.1", port, backlog=1024)
        print(f"serving {kind} on 127.0.0.1:{port} loop={type(loop).__module__}.{type(loop).__name__}", flush=True)
        await server.serve_forever()

    run(main(), use_uvloop)


def serve_aiohttp(port: int, use_uvloop: bool) -> None:
    from aiohttp import web

    ok_headers = {"x-user-id": "alice"}
    deny_headers = {"www-authenticate": "Bearer"}

    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        authorization = request.headers.get("authorization")
        method, path = request.method, request.path
        if method and path.startswith("/") and authorization is not None and authorization.startswith("Bearer "):
            return web.Response(status=200, headers=ok_headers)
        return web.Response(status=401, headers=deny_headers)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = web.Server(handler, access_log=None)
        listener = await loop.create_server(server, "127.0.0.1", port, backlog=1024)
        print(f"serving aiohttp.web.Server on 127.0.0.1:{port} loop={type(loop).__module__}.{type(loop).__name__}", flush=True)
        await listener.serve_forever()

    run(main(), use_uvloop)


def serve_grpc(port: int) -> None:
    import grpc
    from envoy.config.core.v3 import base_pb2
    from envoy.service.auth.v3 import external_auth_pb2, external_auth_pb2_grpc
    from envoy.type.v3 import http_status_pb2
    from google.rpc import code_pb2, status_pb2

    overwrite = base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
    ok = external_auth_pb2.CheckResponse(
        status=status_pb2.Status(code=code_pb2.OK),
        ok_response=external_auth_pb2.OkHttpResponse(headers=[
            base_pb2.HeaderValueOption(header=base_pb2.HeaderValue(key="x-user-id", value="alice"), append_action=overwrite)]))
    denied = external_auth_pb2.CheckResponse(
        status=status_pb2.Status(code=code_pb2.UNAUTHENTICATED),
        denied_response=external_auth_pb2.DeniedHttpResponse(
            status=http_status_pb2.HttpStatus(code=http_status_pb2.Unauthorized),
            headers=[base_pb2.HeaderValueOption(header=base_pb2.HeaderValue(key="www-authenticate", value="Bearer"))]))

    class Trivial(external_auth_pb2_grpc.AuthorizationServicer):  # type: ignore[misc]
        async def Check(self, request: Any, context: Any) -> Any:
            http = request.attributes.request.http
            authorization = http.headers.get("authorization")
            if http.method and http.path.startswith("/") and authorization is not None and authorization.startswith("Bearer "):
                return ok
            return denied

    async def main() -> None:
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        external_auth_pb2_grpc.add_AuthorizationServicer_to_server(Trivial(), server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        print(f"serving grpc.aio Authorization on 127.0.0.1:{port}", flush=True)
        await server.wait_for_termination()

    asyncio.run(main())


def serve(kind: str, port: int, dump: Path | None) -> None:
    if kind == "grpc_aio":
        serve_grpc(port)
    elif kind in ("aiohttp_lowlevel", "aiohttp_lowlevel_uvloop"):
        serve_aiohttp(port, kind.endswith("_uvloop"))
    elif kind == "probe":
        serve_protocol("probe", port, False, dump)
    else:
        loop, _, protocol = kind.partition("_")
        serve_protocol(protocol, port, loop == "uvloop", dump)


KINDS = ("asyncio_raw", "uvloop_raw", "asyncio_httptools", "uvloop_httptools", "uvloop_h11", "aiohttp_lowlevel",
         "aiohttp_lowlevel_uvloop", "grpc_aio", "probe")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("address", help="127.0.0.1:PORT")
    parser.add_argument("--dump", help="the probe's JSON lines (kind probe)")
    args = parser.parse_args(argv)
    host, _, port = args.address.rpartition(":")
    if host != "127.0.0.1" or not port.isdigit():
        parser.error(f"address {args.address!r}: expected 127.0.0.1:PORT (every server listens on loopback)")
    if args.kind == "probe" and not args.dump:
        parser.error("probe needs --dump")
    serve(args.kind, int(port), Path(args.dump) if args.dump else None)


if __name__ == "__main__":
    main()
