"""A real Git repository of route files that tests edit and commit to."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

_IDENTITY = ["-c", "user.name=gatehouse-tests", "-c", "user.email=tests@gatehouse.local"]


def route_doc(name: str, spec: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "gatehouse.io/v1alpha1",
        "kind": "Route",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


class RouteRepo:
    def __init__(self, root: Path, subdir: str = "routes") -> None:
        self.root = root
        self.subdir = subdir
        (root / subdir).mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str) -> str:
        result = subprocess.run(
            ["git", *_IDENTITY, *args], cwd=self.root, capture_output=True, text=True, timeout=60, check=True
        )
        return result.stdout.strip()

    def write(self, filename: str, docs: list[dict[str, Any]] | str) -> Path:
        path = self.root / self.subdir / filename
        path.parent.mkdir(parents=True, exist_ok=True)
        text = docs if isinstance(docs, str) else yaml.safe_dump_all(docs, sort_keys=False)
        path.write_text(text)
        return path

    def remove(self, filename: str) -> None:
        (self.root / self.subdir / filename).unlink()

    def commit(self, message: str = "change routes") -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")
