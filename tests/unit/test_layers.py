"""The import layers (servicekit/__init__.py): the kernel imports no Gatehouse package; a
library (the rate-limit engine) imports only itself and the kernel; a service imports
only itself, libraries and the kernel, never another service; and no two modules import
each other, directly or around a cycle (imports under TYPE_CHECKING count too)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KERNEL = "servicekit"
LIBRARIES = ("limiter",)
SERVICES = ("control_plane", "ext_authz", "ratelimit_svc", "telemetry")
CLI = "gatehouse"


def _modules() -> dict[str, Path]:
    found = {}
    for package in (KERNEL, *LIBRARIES, *SERVICES, CLI):
        for path in (ROOT / package).rglob("*.py"):
            if "protos" in path.relative_to(ROOT).parts:
                continue  # generated; imports only itself and protobuf
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _owner(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> set[str]:
    """Every Gatehouse module ``module`` imports; ``from pkg import sub`` names ``pkg.sub``."""
    tree = ast.parse(MODULES[module].read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module for a in node.names]
        found.update(owner for owner in map(_owner, names) if owner is not None and owner != module)
    return found


GRAPH = {module: imports_of(module) for module in MODULES}


def allowed(importer: str, imported: str) -> bool:
    top, target = importer.split(".")[0], imported.split(".")[0]
    if top == CLI:
        return True
    if top == KERNEL:
        return target == KERNEL
    if top in LIBRARIES:
        return target in (top, KERNEL)
    return target in (top, KERNEL, *LIBRARIES)


def test_the_walk_sees_the_tree() -> None:
    assert {"servicekit.audit", "control_plane.runtime", "ext_authz.service", "gatehouse.cli"} <= set(MODULES)
    assert "servicekit.audit" in GRAPH["control_plane.runtime"] or "servicekit.audit" in GRAPH["control_plane.config"]


@pytest.mark.parametrize("package", [KERNEL, *LIBRARIES, *SERVICES])
def test_no_import_crosses_a_layer(package: str) -> None:
    crossing = sorted(
        f"{importer} imports {imported}"
        for importer, targets in GRAPH.items()
        if importer.split(".")[0] == package
        for imported in targets
        if not allowed(importer, imported)
    )
    assert crossing == []


def test_no_import_cycle() -> None:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in GRAPH[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(GRAPH):
        if node not in index:
            visit(node)
    assert cycles == []


def test_the_checks_can_fail() -> None:
    assert not allowed("ext_authz.service", "ratelimit_svc.service")
    assert not allowed("limiter.engine", "ext_authz.service")
    assert not allowed("servicekit.audit", "control_plane.errors")
    assert not allowed("limiter.engine", "ratelimit_svc.service")
    assert allowed("gatehouse.cli", "ext_authz.service") and allowed("telemetry.config", "servicekit.model")
    assert allowed("ext_authz.check.http_check", "limiter.verdict") and allowed("limiter.engine", "servicekit.kafka")
