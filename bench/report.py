"""What every benchmark's ``main`` does around its measurements: the command line it
reports, its work directory, and the one JSON document it prints to stdout."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any


def command_line(argv: list[str] | None) -> str:
    """The report's ``command``: this run's command line (``argv`` when main was given one)."""
    return " ".join([Path(sys.executable).name, *sys.argv]) if argv is None else " ".join(argv)


def work_directory(given: str | None, prefix: str) -> Path:
    """``--workdir`` if given, else a new temporary directory named ``<prefix>…``; created."""
    workdir = Path(given) if given else Path(tempfile.mkdtemp(prefix=prefix))
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir


def print_report(report: dict[str, Any]) -> None:
    """The report to stdout, indented, with a final newline."""
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
