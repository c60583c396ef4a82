"""Options and guards shared by every test directory.

The suite runs in two phases (``make test``, docs/testing.md): most tests on parallel
pytest-xdist workers, then the tests marked ``serial`` alone (``tests/serial_tests.py``
says which and why); ``make test-lanes`` runs the two at once (scripts/test-lanes). Each
worker, and a serial lane beside them, is handed its own part of the port span
(``servicekit.child_process.PORT_SLICE``), so no two of them share a port.

Every Gatehouse service the suite starts runs the loop watchdog (servicekit/loop_watchdog.py)
and writes each stall to one directory; a test during which a stall is reported fails,
and so does the session if one arrives after the last test. A test that must allow a
longer stall gives its process a larger ``GATEHOUSE_LOOP_WATCHDOG`` and says why.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from servicekit import loop_watchdog
from servicekit.child_process import PORT_SLICE, ManagedProcess
from tests.serial_tests import is_serial

_REPORTS = Path(tempfile.mkdtemp(prefix="gatehouse-loop-stalls-"))
_seen: set[tuple[str, int]] = set()
_between_tests: list[dict[str, object]] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite translator golden files from the current output and delete stale ones",
    )


_LATE_STALLS_DIR = "GATEHOUSE_TEST_LATE_STALLS"
"""Where an xdist worker leaves the stalls it saw after its last test: a worker's exit
status does not reach the controller, which fails the run for them instead."""


_PORT_PARTS = "GATEHOUSE_TEST_PORT_PARTS"
"""How many parts of the port span to cut when the workers are not the only test run."""


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault(loop_watchdog.SETTING, "on")
    os.environ[loop_watchdog.REPORT_DIR] = str(_REPORTS)
    config.addinivalue_line("markers", "serial: runs after the parallel phase, alone (tests/serial_tests.py)")
    worker, workers = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if worker and workers:
        # scripts/test-lanes keeps the last part for the serial lane running alongside.
        parts = os.environ.get(_PORT_PARTS, workers)
        os.environ[PORT_SLICE] = f"{int(worker.removeprefix('gw'))}/{parts}"
    else:
        os.environ.setdefault(_LATE_STALLS_DIR, tempfile.mkdtemp(prefix="gatehouse-late-stalls-"))


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if is_serial(item.nodeid):
            item.add_marker(pytest.mark.serial)


def _new_stalls() -> list[dict[str, object]]:
    found = []
    for path in sorted(_REPORTS.glob("*.jsonl")):
        for number, line in enumerate(path.read_text().splitlines()):
            if (path.name, number) not in _seen:
                _seen.add((path.name, number))
                found.append(json.loads(line))
    return found


def _describe(stalls: list[dict[str, object]]) -> str:
    parts = []
    for stall in stalls:
        stack = "".join(str(frame) for frame in list(stall.get("stack") or [])[-6:])  # type: ignore[call-overload]
        parts.append(
            f"{stall['service']} (pid {stall['pid']}) held its event loop {stall['held_ms']} ms "
            f"(threshold {stall['threshold_ms']} ms; of {stall.get('wall_ms')} ms late, "
            f"{stall.get('runqueue_ms')} waiting for a CPU and {stall.get('steal_ms')} stolen by the hypervisor, not counted): "
            f"{stall['culprit']}\n{stack}"
        )
    return "\n".join(parts)


@pytest.fixture(autouse=True)
def _no_event_loop_stalls() -> Iterator[None]:
    _between_tests.extend(_new_stalls())  # reported between tests: the session check fails them
    yield
    stalls = _new_stalls()
    if stalls:
        pytest.fail("a service blocked its event loop during this test:\n" + _describe(stalls), pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def _no_process_outlives_the_session() -> Iterator[None]:
    """Every process a test started through the harness is stopped by the end of the run,
    even when a test failed before its own cleanup was in place: a leaked gateway would
    keep using the CPU the rest of the suite (and the machine's other work) needs."""
    started: list[ManagedProcess] = []
    original = ManagedProcess.start.__func__  # type: ignore[attr-defined]

    def recording(cls: type[ManagedProcess], *args: object, **kwargs: object) -> ManagedProcess:
        process: ManagedProcess = original(cls, *args, **kwargs)
        started.append(process)
        return process

    ManagedProcess.start = classmethod(recording)  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        ManagedProcess.start = classmethod(original)  # type: ignore[method-assign,assignment]
        for process in started:
            if process.returncode is None:
                process.stop()  # a no-op for one its test stopped; it only reaps and kills what leaked


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    late = _describe(_between_tests + _new_stalls())
    shared = os.environ.get(_LATE_STALLS_DIR)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        if late and shared:
            (Path(shared) / f"{os.environ['PYTEST_XDIST_WORKER']}.txt").write_text(late)
        return
    if shared:
        late = "\n".join(part for part in [late, *(p.read_text() for p in sorted(Path(shared).glob("*.txt")))] if part)
    if late:
        session.config.stash[_late_stalls] = late
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_late_stalls = pytest.StashKey[str]()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    late = terminalreporter.config.stash.get(_late_stalls, "")
    if late:
        terminalreporter.section("event loop stalls reported between tests or after the last one")
        terminalreporter.write_line(late)
