"""Test hosts with non-loopback addresses, inside a network namespace the suite owns.

EndpointSlices refuse 127.0.0.0/8, so the upstreams they name need other addresses.
Those addresses exist only inside a namespace made for the session and on the veth pair
that joins it to the root namespace: nothing is added to `lo` or to any interface the
machine already had. Envoy and the control plane stay in the root namespace and reach
the upstreams over the pair. Removing the namespace kills its processes and takes the
pair with it; a namespace left by a run that was killed outright (its owner pid gone) is
removed at the next start. Needs root or CAP_NET_ADMIN.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
import random
import re
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from typing import NoReturn

import pytest

from .binaries import require_binary, running_in_ci

PREFIX = "gatehouse-t"
"""Namespace names are ``gatehouse-t<owner pid>-<n>``: the sweep tells a stale one by its pid."""

_created = itertools.count()


class NetnsError(RuntimeError):
    pass


def ip(*args: str, check: bool = True) -> str:
    binary = require_binary("ip", "apt-get install iproute2")
    result = subprocess.run([binary, *args], capture_output=True, text=True, timeout=15)
    if check and result.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {result.stderr.strip() or f'exit {result.returncode}'}")
    return result.stdout


def root_addresses() -> list[str]:
    """``ip -o addr show`` of the root namespace, without the lifetimes that count down."""
    lines = ip("-o", "addr", "show").splitlines()
    return sorted(re.sub(r"\s+(valid|preferred)_lft \S+", "", line).strip() for line in lines)


def _pids(namespace: str) -> list[int]:
    return [int(pid) for pid in ip("netns", "pids", namespace, check=False).split()]


def _remove(namespace: str) -> None:
    for _ in range(50):
        pids = _pids(namespace)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
    ip("netns", "del", namespace, check=False)


def sweep_stale() -> list[str]:
    """Remove namespaces of earlier runs whose owner process no longer exists."""
    removed = []
    for line in ip("netns", "list", check=False).splitlines():
        name = line.split()[0] if line.strip() else ""
        match = re.fullmatch(rf"{PREFIX}(\d+)-\d+", name)
        if match is None or int(match.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(match.group(1)), 0)
        except ProcessLookupError:
            _remove(name)
            removed.append(name)
        except PermissionError:
            pass
    return removed


def _free_subnet() -> ipaddress.IPv4Network:
    taken = [ipaddress.ip_network(word, strict=False) for word in re.findall(r"\d+\.\d+\.\d+\.\d+/\d+", ip("-4", "-o", "addr", "show"))]
    taken += [
        ipaddress.ip_network(word.split()[0], strict=False)
        for word in ip("-4", "route", "show").splitlines()
        if re.match(r"\d+\.\d+\.\d+\.\d+(/\d+)?\s", word)
    ]
    rng = random.SystemRandom()
    for _ in range(50):
        subnet = ipaddress.ip_network(f"10.{rng.randrange(200, 250)}.{rng.randrange(0, 256)}.0/24")
        if not any(subnet.overlaps(other) for other in taken):
            return subnet
    raise NetnsError("no free 10.200-249.x.0/24 subnet for the test namespace")


class TestNetwork:
    """One namespace, its veth pair, and the host addresses handed out inside it."""

    __test__ = False  # not a pytest test class

    def __init__(self, namespace: str, subnet: ipaddress.IPv4Network, inner: str) -> None:
        self.namespace = namespace
        self.subnet = subnet
        self.gateway = str(subnet.network_address + 1)
        self._inner = inner
        self._next = 2

    def address(self) -> str:
        """A new address inside the namespace, reachable from the root namespace."""
        host = str(self.subnet.network_address + self._next)
        self._next += 1
        ip("netns", "exec", self.namespace, "ip", "addr", "add", f"{host}/{self.subnet.prefixlen}", "dev", self._inner)
        return host

    def addresses(self, count: int) -> list[str]:
        return [self.address() for _ in range(count)]

    def argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the namespace (ip netns exec execs it: the pid stays the child's)."""
        return [require_binary("ip", "apt-get install iproute2"), "netns", "exec", self.namespace, *argv]

    def pids(self) -> list[int]:
        return _pids(self.namespace)


def unavailable(message: str) -> NoReturn:
    message = f"cannot create a network namespace for test upstreams (needs root or CAP_NET_ADMIN): {message}"
    if running_in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@contextlib.contextmanager
def test_network() -> Iterator[TestNetwork]:
    """A namespace joined to the root namespace by a veth pair; removed on exit."""
    sweep_stale()
    pid, n = os.getpid(), next(_created)
    namespace, outer, inner = f"{PREFIX}{pid}-{n}", f"gh{pid}x{n}r", f"gh{pid}x{n}n"
    try:
        ip("netns", "add", namespace)
    except NetnsError as exc:
        unavailable(str(exc))
    try:
        subnet = _free_subnet()
        gateway = f"{subnet.network_address + 1}/{subnet.prefixlen}"
        ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        ip("link", "set", inner, "netns", namespace)
        ip("addr", "add", gateway, "dev", outer)
        ip("link", "set", outer, "up")
        for device in (inner, "lo"):
            ip("netns", "exec", namespace, "ip", "link", "set", device, "up")
        yield TestNetwork(namespace, subnet, inner)
    finally:
        _remove(namespace)
        ip("link", "del", outer, check=False)  # gone with the namespace; a no-op then


test_network.__test__ = False  # type: ignore[attr-defined]
