"""Free loopback ports, so parallel tests and sessions never fight over fixed numbers."""

from __future__ import annotations

import socket


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago.

    The kernel picks it (bind to port 0). There is a small window before the
    caller binds it; that is acceptable for tests and far safer than constants.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
