"""servicekit/http1_server.py on real sockets (127.0.0.1): keep-alive, order, limits, errors."""

from __future__ import annotations

import asyncio
import socket

import pytest

from servicekit.http1_server import Http1Server, Request, response


async def handler(request: Request) -> bytes:
    if request.path.startswith("/slow"):
        await asyncio.sleep(0.05)
    if request.path == "/boom":
        raise RuntimeError("boom")
    body = f"{request.method} {request.path} {request.headers.get('authorization', '-')}".encode()
    return response(200, (("x-user-id", "alice"),), body)


async def exchange(port: int, raw: bytes, *, replies: int = 1) -> list[bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    out = []
    for _ in range(replies):
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        length = int(next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")).split(b":")[1])
        out.append(head + await reader.readexactly(length))
    writer.close()
    return out


@pytest.fixture
async def server() -> Http1Server:
    started = Http1Server("127.0.0.1:0", handler, max_header_bytes=1024)
    await started.start()
    yield started  # type: ignore[misc]
    await started.stop()


async def test_keep_alive_answers_in_order_fast_and_slow(server: Http1Server) -> None:
    raw = (
        b"GET /slow/1 HTTP/1.1\r\nhost: a\r\nAuthorization: Bearer x\r\n\r\n"
        b"POST /fast HTTP/1.1\r\nhost: a\r\ncontent-length: 0\r\n\r\n"
        b"GET /slow/3 HTTP/1.1\r\nhost: a\r\n\r\n"
    )
    first, second, third = await exchange(server.port, raw, replies=3)
    assert first.startswith(b"HTTP/1.1 200 OK\r\n") and first.endswith(b"GET /slow/1 Bearer x") and b"x-user-id: alice" in first
    assert second.endswith(b"POST /fast -") and third.endswith(b"GET /slow/3 -")


async def test_a_failing_handler_is_a_500_and_the_connection_lives(server: Http1Server) -> None:
    failed, ok = await exchange(server.port, b"GET /boom HTTP/1.1\r\nhost: a\r\n\r\nGET /x HTTP/1.1\r\nhost: a\r\n\r\n", replies=2)
    assert failed.startswith(b"HTTP/1.1 500 ") and ok.startswith(b"HTTP/1.1 200 ")


async def test_oversized_headers_get_431_and_a_close(server: Http1Server) -> None:
    [reply] = await exchange(server.port, b"GET / HTTP/1.1\r\nhost: a\r\nx-big: " + b"a" * 2000 + b"\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 431 ") and b"connection: close" in reply


async def test_garbage_gets_400(server: Http1Server) -> None:
    [reply] = await exchange(server.port, b"NOT HTTP AT ALL\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 400 ")


async def test_idle_connections_are_closed() -> None:
    server = Http1Server("127.0.0.1:0", handler, idle_timeout=0.2)
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        assert await asyncio.wait_for(reader.read(), 5) == b"", "the server closed the idle connection"
        writer.close()
    finally:
        await server.stop()


async def test_two_servers_share_a_port() -> None:
    first = Http1Server("127.0.0.1:0", handler)
    await first.start()
    second = Http1Server(f"127.0.0.1:{first.port}", handler)
    await second.start()
    try:
        [reply] = await exchange(first.port, b"GET / HTTP/1.1\r\nhost: a\r\n\r\n")
        assert reply.startswith(b"HTTP/1.1 200 ")
    finally:
        await first.stop()
        await second.stop()
    plain = socket.socket()
    plain.bind(("127.0.0.1", 0))
    plain.listen()
    try:
        with pytest.raises(OSError, match="cannot listen on 127.0.0.1"):
            await Http1Server(f"127.0.0.1:{plain.getsockname()[1]}", handler).start()
    finally:
        plain.close()


async def body_handler(request: Request) -> bytes:
    return response(200, (), f"{len(request.body)}:".encode() + request.body[:16])


@pytest.fixture
async def body_server() -> Http1Server:
    started = Http1Server("127.0.0.1:0", body_handler, max_body_bytes=100)
    await started.start()
    yield started  # type: ignore[misc]
    await started.stop()


async def test_a_body_is_read_by_content_length_and_chunked_and_each_request_has_its_own(body_server: Http1Server) -> None:
    raw = (
        b"POST /a HTTP/1.1\r\nhost: a\r\ncontent-length: 11\r\n\r\n{\"a\": true}"
        b"POST /b HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\n\r\n3\r\n[1,\r\n2\r\n2]\r\n0\r\n\r\n"
        b"GET /c HTTP/1.1\r\nhost: a\r\n\r\n"
    )
    first, second, third = await exchange(body_server.port, raw, replies=3)
    assert first.endswith(b'11:{"a": true}') and second.endswith(b"5:[1,2]") and third.endswith(b"0:")


async def test_a_body_over_the_bound_is_413_and_a_close_by_length_or_by_bytes(body_server: Http1Server) -> None:
    # Announced too long: refused before a byte of it is read.
    [announced] = await exchange(body_server.port, b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 101\r\n\r\n")
    assert announced.startswith(b"HTTP/1.1 413 ") and b"connection: close" in announced
    chunks = b"".join(b"20\r\n" + b"x" * 32 + b"\r\n" for _ in range(4)) + b"0\r\n\r\n"
    [streamed] = await exchange(body_server.port, b"POST / HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\n\r\n" + chunks)
    assert streamed.startswith(b"HTTP/1.1 413 ") and b"connection: close" in streamed
    [exact] = await exchange(body_server.port, b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 100\r\n\r\n" + b"y" * 100)
    assert exact.startswith(b"HTTP/1.1 200 ") and exact.endswith(b"100:" + b"y" * 16)
