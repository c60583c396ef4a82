"""The CLI's own error: a command that cannot do what it was asked prints ``error: ...``
(never a traceback) and exits with status 2."""

from __future__ import annotations


class CommandError(Exception):
    """Printed as ``error: ...``; exit status 2."""
