"""The committed generated code is exactly what scripts/gen-protos produces."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.binaries import running_in_ci

ROOT = Path(__file__).resolve().parents[3]
GENERATED = ROOT / "servicekit" / "protos"


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_regenerating_gives_the_committed_files(tmp_path: Path) -> None:
    if importlib.util.find_spec("grpc_tools") is None:
        message = "grpcio-tools is not installed (pip install grpcio-tools)"
        if running_in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    out = tmp_path / "protos"
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gen-protos"), str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    fresh, committed = _tree(out), _tree(GENERATED)
    assert sorted(fresh) == sorted(committed), "run scripts/gen-protos and commit servicekit/protos/"
    for name, content in fresh.items():
        assert content == committed[name], f"{name} differs: run scripts/gen-protos and commit servicekit/protos/"


def test_generated_modules_import_with_the_documented_path() -> None:
    from servicekit.protos.gatehouse.admin.v1 import revocation_pb2, revocation_pb2_grpc

    assert revocation_pb2.DESCRIPTOR.package == "gatehouse.admin.v1"
    assert hasattr(revocation_pb2_grpc, "RevocationAdminStub")
    assert [m.name for m in revocation_pb2.DESCRIPTOR.services_by_name["RevocationAdmin"].methods] == [
        "Revoke",
        "Block",
        "Unblock",
        "List",
    ]
