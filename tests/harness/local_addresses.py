"""Extra local IP addresses on the loopback interface, for EndpointSlices.

The API server refuses loopback addresses (127.0.0.0/8, ::1) in EndpointSlices, so a
test upstream on 127.0.0.1 cannot be named in one. An address from 10.0.0.0/8 added to
`lo` is accepted by the API server and still never leaves the machine. Needs root
(CAP_NET_ADMIN), as CI has; every address added here is removed on exit.
"""

from __future__ import annotations

import contextlib
import random
import subprocess
from collections.abc import Iterator

import pytest

from .binaries import require_binary, running_in_ci


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require_binary("ip", "apt-get install iproute2"), *args], capture_output=True, text=True, timeout=10)


@contextlib.contextmanager
def local_addresses(count: int) -> Iterator[list[str]]:
    present = _ip("-4", "-o", "addr", "show").stdout
    rng = random.SystemRandom()
    for _ in range(20):
        prefix = f"10.{rng.randrange(200, 250)}.{rng.randrange(0, 256)}"
        if f" {prefix}." not in present:
            break
    addresses = [f"{prefix}.{host}" for host in range(2, 2 + count)]
    added: list[str] = []
    try:
        for address in addresses:
            result = _ip("addr", "add", f"{address}/32", "dev", "lo")
            if result.returncode != 0:
                message = f"cannot add {address} to lo (needs root/CAP_NET_ADMIN): {result.stderr.strip()}"
                if running_in_ci():
                    pytest.fail(message)
                pytest.skip(message)
            added.append(address)
        yield addresses
    finally:
        for address in added:
            _ip("addr", "del", f"{address}/32", "dev", "lo")
