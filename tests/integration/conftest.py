"""Fixtures that build whole gateways from real processes (see tests/harness/gateway.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.binaries import require_binary
from tests.harness.envoy import envoy_binary
from tests.harness.gateway import GatewayStack
from tests.harness.ports import refused_port
from tests.harness.redis import RedisServer

StackFactory = Callable[..., GatewayStack]


@pytest.fixture
def make_stack(tmp_path: Path) -> Iterator[StackFactory]:
    envoy_binary()
    require_binary("git", "apt-get install git")
    stacks: list[GatewayStack] = []

    def factory(name: str = "stack", **kwargs: Any) -> GatewayStack:
        stack = GatewayStack(tmp_path / name, **kwargs)
        stacks.append(stack)
        return stack

    yield factory
    for stack in stacks:
        stack.stop()


@pytest.fixture
def refused_address() -> Iterator[str]:
    """``127.0.0.1:<port>`` where connections are refused for the whole test (see
    ``refused_port``): a service configured there is down, and stays down even when the
    test starts servers of its own afterwards."""
    with refused_port() as port:
        yield f"127.0.0.1:{port}"


@pytest.fixture(params=["sotw", "delta"])
def protocol(request: pytest.FixtureRequest) -> str:
    """Run a test once over state-of-the-world ADS and once over delta ADS."""
    value: str = request.param
    return value


@pytest.fixture(params=["http", "grpc"])
def transport(request: pytest.FixtureRequest) -> str:
    """Run an authorization test over Envoy's HTTP protocol (the default) and over gRPC."""
    value: str = request.param
    return value


def ext_authz_entry(services: list[Any]) -> dict[str, Any]:
    """The control plane's ``extAuthz`` block for these ExtAuthzProcesses."""
    return {"address": [s.check_address for s in services], "protocol": services[0].transport}


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    """One redis-server (Debian's) on a free loopback port, for this test only."""
    server = RedisServer.start(log_dir=tmp_path / "redis")
    try:
        yield server
    finally:
        server.stop()
