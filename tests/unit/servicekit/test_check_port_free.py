"""``check_port_free`` (the workers' supervisor, before it starts them): a listener on the
port is refused, the connections a previous process left behind are not (issue 25)."""

from __future__ import annotations

import socket

import pytest

from servicekit.workers import check_port_free


def listener(*, reuse_port: bool = False) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio, aiohttp and gRPC do
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


@pytest.mark.parametrize("reuse_port", [False, True])
def test_a_port_someone_listens_on_is_refused(reuse_port: bool) -> None:
    with listener(reuse_port=reuse_port) as stale:
        with pytest.raises(OSError, match=r"cannot listen on 127\.0\.0\.1:\d+: Address already in use"):
            check_port_free(f"127.0.0.1:{stale.getsockname()[1]}")


@pytest.mark.parametrize("client_closes", [True, False], ids=["time-wait", "fin-wait2"])
def test_connections_a_previous_process_left_do_not_block_the_port(client_closes: bool) -> None:
    """The server closes first (its process died): its side of the connection stays in
    FIN_WAIT2 while the client keeps it, TIME_WAIT once the client closes too."""
    server = listener()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    accepted.close()
    server.close()
    if client_closes:
        client.recv(1)  # the server's FIN
        client.close()
    try:
        check_port_free(f"127.0.0.1:{port}")
    finally:
        client.close()
