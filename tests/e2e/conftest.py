"""Fixtures shared by the whole-stack tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness import netns


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
