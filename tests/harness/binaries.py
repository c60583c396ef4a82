"""Locate service binaries; under CI a missing one fails the test instead of skipping it."""

from __future__ import annotations

import os

import pytest

from servicekit.child_process import find_binary


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
