"""Fixtures shared by the whole-stack tests."""

from __future__ import annotations

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
    before = netns.root_addresses()
    with netns.test_network() as network:
        yield network
    after = netns.root_addresses()
    assert after == before, f"the root namespace's addresses changed:\nbefore: {before}\nafter:  {after}"
