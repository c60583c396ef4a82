"""Routes from files on disk: one file, or every *.yaml/*.yml under a directory.

Used by `gatehouse validate` and `gatehouse render`, which must judge a route tree
exactly as the Git source would.
"""

from __future__ import annotations

from pathlib import Path

from control_plane.errors import Problem
from control_plane.heap import collector_paused
from control_plane.model.loading import duplicate_problems, parse_route_file
from control_plane.model.route import Origin, Route
from control_plane.sources.git import ROUTE_SUFFIXES


def route_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(ROUTE_SUFFIXES))
    return [path]


def load_route_path(path: Path) -> tuple[list[Route], list[Problem]]:
    routes: list[Route] = []
    problems: list[Problem] = []
    if not path.exists():
        return [], [Problem(str(path), "", "no such file or directory")]
    base = path if path.is_dir() else path.parent
    with collector_paused():
        for file in route_files(path):
            try:
                text = file.read_bytes()
            except OSError as exc:
                problems.append(Problem(str(file), "", f"cannot read: {exc.strerror}"))
                continue
            location = str(file.relative_to(base)) if path.is_dir() else str(file)
            file_routes, file_problems = parse_route_file(text, Origin("file", location))
            routes.extend(file_routes)
            problems.extend(file_problems)
    problems.extend(duplicate_problems(routes))
    return routes, problems
