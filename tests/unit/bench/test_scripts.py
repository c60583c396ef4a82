"""Every benchmark is a module of the ``bench`` package, run as ``python -m bench.<name>`` from
the repository root with no path patching, and prints a report the schema accepts."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.kit.report import check_report

ROOT = Path(__file__).resolve().parents[3]
SOURCES = sorted(p for p in (ROOT / "bench").rglob("*.py"))
BENCHMARKS = sorted(p.stem for p in (ROOT / "bench").glob("*.py") if p.stem != "__init__")


def test_the_walk_sees_every_benchmark() -> None:
    assert {"propagation", "authz", "ratelimit", "gateway", "accesslog", "validation"} <= set(BENCHMARKS)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_patches_the_import_path(path: Path) -> None:
    text = path.read_text()
    assert "sys.path" not in text
    assert "noqa: E402" not in text


@pytest.mark.parametrize("name", BENCHMARKS)
def test_each_benchmark_is_a_module_with_a_main(name: str) -> None:
    module = importlib.import_module(f"bench.{name}")
    assert callable(getattr(module, "main", None)), f"bench.{name} has no main()"
    with pytest.raises(SystemExit) as leaving:
        module.main(["--help"])
    assert leaving.value.code == 0


def test_python_m_runs_a_benchmark_from_the_root_and_prints_the_schema() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-m", "bench.validation", "--number", "5", "--rounds", "1"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    check_report(report)
    assert report["command"].endswith("-m bench.validation --number 5 --rounds 1")
    assert report["baseline"]["library"] == "jsonschema"
    assert report["ratios"]["jsonschema"]["valid"] == 1.0
