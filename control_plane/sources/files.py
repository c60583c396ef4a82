"""Routes from files on disk: one file, or every *.yaml/*.yml under a directory.

Used by `gatehouse validate` and `gatehouse render`, which must judge a route tree
exactly as the Git source would.
"""

from __future__ import annotations

from pathlib import Path

from control_plane.errors import Problem
from control_plane.heap import collector_paused
from control_plane.model.loading import Documents, duplicate_problems, parse_documents
from control_plane.model.namespace_binding import NamespaceBinding, bind_documents
from control_plane.model.route import Origin, Route
from control_plane.sources.git import ROUTE_SUFFIXES


def route_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(ROUTE_SUFFIXES))
    return [path]


def load_documents_path(path: Path, binding: NamespaceBinding | None = None) -> Documents:
    """Every Route and ReferenceGrant under ``path``, and every problem, as Git would see them.

    With a source's ``binding`` (``path`` standing for the source's path), documents
    claiming a namespace their file may not are left out and listed in ``refused``;
    without one, namespaces are not judged."""
    found = Documents()
    if not path.exists():
        found.problems.append(Problem(str(path), "", "no such file or directory"))
        return found
    base = path if path.is_dir() else path.parent
    with collector_paused():
        for file in route_files(path):
            try:
                text = file.read_bytes()
            except OSError as exc:
                found.problems.append(Problem(str(file), "", f"cannot read: {exc.strerror}"))
                continue
            location = str(file.relative_to(base)) if path.is_dir() else str(file)
            one = parse_documents(text, Origin("file", location))
            if binding is not None:
                one, refused = bind_documents(one, binding, location)
                found.refused.extend(refused)
            found.routes.extend(one.routes)
            found.grants.extend(one.grants)
            found.problems.extend(one.problems)
    found.problems.extend(duplicate_problems(found.routes))
    found.problems.extend(duplicate_problems(found.grants, "ReferenceGrant"))
    return found


def load_route_path(path: Path) -> tuple[list[Route], list[Problem]]:
    """The Routes under ``path`` and every problem (``load_documents_path`` without the grants)."""
    found = load_documents_path(path)
    return found.routes, found.problems
