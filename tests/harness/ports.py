"""Loopback ports for tests: free ones, so parallel tests and sessions never fight over
fixed numbers, and refused ones, for "nothing listens there" cases."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

from servicekit.child_process import free_port

__all__ = ["free_port", "refused_port"]


@contextmanager
def refused_port() -> Iterator[int]:
    """A port on 127.0.0.1 where a connection is refused for as long as the block runs.

    ``free_port()`` is wrong for this: the port is free only a moment, and a server the
    test starts afterwards (an upstream, a sidecar) may be given it, so the "unreachable"
    service answers. The socket here is bound but never listens: connects get RST, and no
    other socket can bind the port (ours does not set SO_REUSEPORT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]
