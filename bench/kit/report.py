"""The one result schema: every benchmark prints one JSON document to stdout, with at least

    benchmark   its name (``python -m bench.<benchmark>``)
    command     the command line that produced it
    settings    what the run was asked to do (durations, rounds, connections, sizes, ...)
    machine     where it ran (``bench.kit.machine.describe``)
    baseline    what the ratios divide by, measured in the same run
    ratios      the results as ratios to that baseline: the figures that compare across runs
                and machines (absolute figures on a shared 2-core machine do not)
    wall_s      how long the run took

and whatever else the benchmark measured (its scenarios, tables, aims), beside them.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

FIELDS = ("benchmark", "command", "settings", "machine", "baseline", "ratios", "wall_s")
"""The fields every report has."""


class ReportError(ValueError):
    """A benchmark built a report the schema does not allow (a bug in the benchmark)."""


def new_report(benchmark: str, command: str) -> dict[str, Any]:
    return {"benchmark": benchmark, "command": command}


def check_report(report: dict[str, Any]) -> None:
    """Every field of FIELDS present; settings, machine, baseline and ratios are objects."""
    missing = [name for name in FIELDS if name not in report]
    if missing:
        raise ReportError(f"{report.get('benchmark', '?')}: the report lacks {missing}")
    wrong = [name for name in ("settings", "machine", "baseline", "ratios") if not isinstance(report[name], dict)]
    if wrong:
        raise ReportError(f"{report['benchmark']}: {wrong} must be JSON objects")


def command_line(argv: list[str] | None) -> str:
    """The report's ``command``: this run's command line, as ``python -m bench.<name> …``
    when run that way (``argv``: the arguments main was given instead of sys.argv's)."""
    if argv is not None:
        return " ".join(argv)
    program = Path(sys.argv[0])
    if program.suffix == ".py" and program.parent.name == "bench":
        return " ".join([Path(sys.executable).name, "-m", f"bench.{program.stem}", *sys.argv[1:]])
    return " ".join([Path(sys.executable).name, *sys.argv])


def work_directory(given: str | None, prefix: str) -> Path:
    """``--workdir`` if given, else a new temporary directory named ``<prefix>…``; created."""
    workdir = Path(given) if given else Path(tempfile.mkdtemp(prefix=prefix))
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir


def print_report(report: dict[str, Any]) -> None:
    """The report to stdout, checked, indented, with a final newline."""
    check_report(report)
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
