"""free_port keeps out of the kernel's ephemeral range, where outgoing connections take ports."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from servicekit.child_process import _outside_ephemeral, free_port


def test_the_span_is_below_or_above_the_ephemeral_range(tmp_path: Path) -> None:
    ranges = tmp_path / "range"
    ranges.write_text("32768\t60999\n")
    assert _outside_ephemeral(str(ranges)) == (10000, 32767)
    ranges.write_text("1024 40000\n")
    assert _outside_ephemeral(str(ranges)) == (40001, 65535)
    ranges.write_text("1024 65535\n")
    assert _outside_ephemeral(str(ranges)) is None, "no room: the kernel picks"
    assert _outside_ephemeral(str(tmp_path / "missing")) is None


def test_a_free_port_is_outside_this_machines_ephemeral_range_and_bindable() -> None:
    span = _outside_ephemeral()
    for _ in range(20):
        port = free_port()
        if span is not None:
            assert span[0] <= port <= span[1]
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_handed_out_and_not_yet_bound_is_never_handed_out_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CI failure this prevents: a test chose ext_authz's ports, started a stack whose
    control plane was then given one of them, and ext_authz's readiness probe met gRPC."""
    first = free_port()
    picks = iter([first, first, first - 1])
    monkeypatch.setattr("servicekit.child_process.random.randint", lambda low, high: next(picks))
    monkeypatch.setattr("servicekit.child_process._outside_ephemeral", lambda: (1, 65535))
    second = free_port()
    assert second != first, "the first port is still unbound, so it was free again, but it is taken"
    assert abs(second - first) == 1
