"""Fixtures shared by the whole-stack tests."""

from __future__ import annotations

import os
import re

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import netns
from tests.harness.envoy import envoy_binary
from tests.harness.kubernetes import KubeAPIServer

ROUTE_CRD = Path(__file__).resolve().parents[2] / "charts" / "gatehouse" / "crds" / "routes.gatehouse.io.yaml"


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPIServer]:
    """A real API server with the chart's Route CRD, one per module (the control plane's
    Kubernetes source watches Routes). A module that needs more CRDs has its own."""
    envoy_binary()
    server = KubeAPIServer.start(tmp_path_factory.mktemp("kube"))
    try:
        server.kubectl("apply", "-f", str(ROUTE_CRD))
        server.wait_established("routes.gatehouse.io")
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def test_network() -> Iterator[netns.TestNetwork]:
    """Upstream hosts an EndpointSlice may name, in a namespace of the session's own.

    Its teardown is the guard: the root namespace's addresses must be what they were.
    """
    def ours_and_the_machines() -> list[str]:
        # Parallel workers' own test networks come and go meanwhile (veths named gh<pid>x<n>r).
        return [line for line in netns.root_addresses()
                if not any(int(pid) != os.getpid() for pid in re.findall(r"\bgh(\d+)x\d+r\b", line))]

    before = ours_and_the_machines()
    with netns.test_network() as network:
        yield network
    after = ours_and_the_machines()
    assert after == before, f"the root namespace's addresses changed:\nbefore: {before}\nafter:  {after}"
