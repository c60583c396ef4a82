"""free_port keeps out of the kernel's ephemeral range, where outgoing connections take ports."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from servicekit.child_process import PORT_SLICE, _outside_ephemeral, _recent, _slice, free_port


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


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_a_port_handed_out_and_not_yet_bound_is_never_handed_out_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CI failure this prevents: a test chose ext_authz's ports, started a stack whose
    control plane was then given one of them, and ext_authz's readiness probe met gRPC."""
    first = free_port()
    # A neighbour nothing holds now and not handed out lately (another test of this process
    # may hold first - 1).
    neighbour = next(port for port in range(first - 1, first - 200, -1) if port not in _recent and _bindable(port))
    picks = iter([first, first, neighbour])
    monkeypatch.setattr("servicekit.child_process.random.randint", lambda low, high: next(picks))
    monkeypatch.setattr("servicekit.child_process._outside_ephemeral", lambda: (1, 65535))
    second = free_port()
    assert second != first, "the first port is still unbound, so it was free again, but it is taken"
    assert second == neighbour


def test_parallel_workers_get_disjoint_parts_of_the_span(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 34: pytest-xdist workers are separate processes, each with its own memory of
    recent ports, so each gets a part of the span no other worker's part overlaps."""
    span = (10000, 32767)
    parts = [_slice(span, f"{index}/4") for index in range(4)]
    assert parts[0][0] == span[0] and parts[-1][1] <= span[1]
    for (_, high), (low, _) in zip(parts, parts[1:]):
        assert high < low, parts
    assert _slice(span, None) == span and _slice(span, "") == span
    for bad in ("4/4", "-1/4", "a/b", "1", "0/1000"):
        with pytest.raises(ValueError, match=PORT_SLICE):
            _slice(span, bad)


def test_each_worker_is_only_ever_handed_ports_of_its_own_part(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through free_port itself, as each worker's process would call it: 200 ports per
    worker, none outside its part and none shared between two workers."""
    monkeypatch.setattr("servicekit.child_process._outside_ephemeral", lambda: (10000, 32767))
    handed: dict[int, set[int]] = {}
    for index in range(3):
        monkeypatch.setenv(PORT_SLICE, f"{index}/3")
        low, high = _slice((10000, 32767), f"{index}/3")
        handed[index] = {free_port() for _ in range(200)}
        assert all(low <= port <= high for port in handed[index]), (index, low, high)
    assert not (handed[0] & handed[1]) and not (handed[1] & handed[2]) and not (handed[0] & handed[2])
