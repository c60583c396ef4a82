"""``waitingRoom`` in a route file: each bad value named by file, line, field and reason,
as the control plane and ``gatehouse validate`` report it."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from control_plane.model import Origin, parse_route_file
from gatehouse.commands import validate
from tests.unit.control_plane.model.test_schema_errors import FILE, route

CASES = {
    "admitPerSecond missing": ("  waitingRoom: {maxWaiting: 10}", f"{FILE}:7: spec.waitingRoom.admitPerSecond: required field is missing"),
    "admitPerSecond zero": (
        "  waitingRoom: {admitPerSecond: 0, maxWaiting: 10}",
        f"{FILE}:7: spec.waitingRoom.admitPerSecond: Input should be greater than or equal to 1",
    ),
    "maxWaiting missing": ("  waitingRoom: {admitPerSecond: 5}", f"{FILE}:7: spec.waitingRoom.maxWaiting: required field is missing"),
    "maxWaiting too large": (
        "  waitingRoom: {admitPerSecond: 5, maxWaiting: 2000000}",
        f"{FILE}:7: spec.waitingRoom.maxWaiting: Input should be less than or equal to 1000000",
    ),
    "ticketTtl too short": (
        "  waitingRoom: {admitPerSecond: 5, maxWaiting: 10, ticketTtl: 1s}",
        f"{FILE}:7: spec.waitingRoom: ticketTtl (1s) must be from 5s to 1h",
    ),
    "ticketTtl too long": (
        "  waitingRoom: {admitPerSecond: 5, maxWaiting: 10, ticketTtl: 2h}",
        "ticketTtl (2h) must be from 5s to 1h",
    ),
    "ticketTtl without unit": (
        "  waitingRoom: {admitPerSecond: 5, maxWaiting: 10, ticketTtl: 30}",
        "spec.waitingRoom.ticketTtl: 30 has no unit",
    ),
    "onStoreFailure unknown": (
        "  waitingRoom: {admitPerSecond: 5, maxWaiting: 10, onStoreFailure: retry}",
        "spec.waitingRoom.onStoreFailure:",
    ),
    "unknown field": (
        "  waitingRoom: {admitPerSecond: 5, maxWaiting: 10, admitPerMinute: 3}",
        f"{FILE}:7: spec.waitingRoom.admitPerMinute: unknown field",
    ),
}


def problems(text: str) -> list[str]:
    _, found = parse_route_file(text, Origin("git", FILE, revision="0123456789abcdef"))
    return [str(p) for p in found]


@pytest.mark.parametrize(("line", "expected"), CASES.values(), ids=list(CASES))
def test_a_bad_waiting_room_names_file_line_field_and_reason(line: str, expected: str) -> None:
    [problem] = problems(route(line))
    assert expected in problem, problem


def test_a_good_waiting_room_has_its_defaults() -> None:
    routes, found = parse_route_file(route("  waitingRoom: {admitPerSecond: 50, maxWaiting: 1000}"), Origin("git", FILE))
    assert found == []
    room = routes[0].spec.waiting_room
    assert room is not None and (room.ticket_ttl, room.on_store_failure) == (60_000, "local")


def test_gatehouse_validate_reports_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "orders.yaml").write_text(route("  waitingRoom: {admitPerSecond: 5, maxWaiting: 10, ticketTtl: 1s}"))
    assert validate.run(argparse.Namespace(paths=[tmp_path], config=None, source=None)) == 1
    assert "orders.yaml:7: spec.waitingRoom: ticketTtl (1s) must be from 5s to 1h" in capsys.readouterr().err
