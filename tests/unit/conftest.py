"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import structlog


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """`gatehouse.cli.main` configures structlog for the whole process, writing to the
    sys.stderr of that moment: under capsys, a capture stream that is closed after the
    test. Later tests that log (the translator warns about unenforced fields) would then
    fail with "I/O operation on closed file", so the previous configuration is put back."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)
