"""The serial phase's list names real test files: a renamed file must not silently move
its timing-bound tests into the parallel phase."""

from __future__ import annotations

import re
from pathlib import Path

from tests.serial_tests import SERIAL, is_serial

ROOT = Path(__file__).resolve().parents[2]


def test_every_entry_names_a_test_file_or_directory_or_test_that_exists() -> None:
    for entry in SERIAL:
        file, _, test = entry.partition("::")
        path = ROOT / file
        assert path.exists(), f"tests/serial_tests.py names {entry}, which does not exist"
        assert path.is_dir() or path.name.startswith("test_"), entry
        if test:
            assert re.search(rf"^(async )?def {re.escape(test)}\(", path.read_text(), re.M), f"{entry}: no such test"


def test_a_node_is_serial_by_its_file_or_its_test_prefix() -> None:
    assert is_serial("tests/e2e/cluster/test_routes.py::test_a_route_is_served")
    assert is_serial("tests/integration/test_changes.py::test_commit_is_served_within_a_second_without_restart[sotw]")
    assert not is_serial("tests/integration/test_changes.py::test_commit_is_served_within_a_second_without_restart_x")
    assert not is_serial("tests/integration/test_changes.py::test_x[sotw]")
    assert not is_serial("tests/integration/test_routing.py::test_x")
    assert not is_serial("tests/unit/control_plane/test_config.py::test_x")
