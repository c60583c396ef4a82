"""The supervisor's check that no one else listens on a service port (servicekit/workers.py).

Found on a real cluster: after the kubelet restarted a killed ext-authz container, the new
supervisor refused to start ("cannot listen on 127.0.0.1:9006: Address already in use")
for a minute, so the container went into CrashLoopBackOff: the killed instance's
connections from Envoy were in TIME_WAIT on that port, and the check bound its probe
socket without SO_REUSEADDR. A listener must still be refused.
"""

from __future__ import annotations

import socket
import time

import pytest

from servicekit.workers import check_port_free


def _listener(*, reuse_port: bool = False) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def _time_wait_on(port_holder: socket.socket) -> int:
    """Accept one connection and close it from the server side first: TIME_WAIT there."""
    port = port_holder.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = port_holder.accept()
    accepted.close()
    port_holder.close()
    time.sleep(0.05)
    client.close()
    return int(port)


def _states(port: int) -> set[str]:
    states = set()
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if int(local.split(":")[1], 16) == port:
                states.add(state)
    return states


@pytest.mark.parametrize("reuse_port", [False, True])
def test_a_port_with_only_time_wait_connections_is_free(reuse_port: bool) -> None:
    port = _time_wait_on(_listener(reuse_port=reuse_port))
    assert "06" in _states(port), "no TIME_WAIT left to test with"
    check_port_free(f"127.0.0.1:{port}")


@pytest.mark.parametrize("reuse_port", [False, True])
def test_a_port_someone_listens_on_is_refused(reuse_port: bool) -> None:
    with _listener(reuse_port=reuse_port) as busy:
        port = busy.getsockname()[1]
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}"):
            check_port_free(f"127.0.0.1:{port}")
