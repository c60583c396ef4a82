"""structlog, configured once per process: JSON lines on stderr, one key set everywhere.

Every event has ``timestamp``, ``level``, ``component`` and ``event``; request-scoped
events add ``request_id``. Nothing here formats tokens or secrets: callers never pass
them (see the per-service notes).
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

Format = Literal["json", "console"]


class _CurrentStderr:
    """``sys.stderr`` as of each write, not as of configuration: loggers are cached on first
    use, and a stream swapped out later (pytest's capture, a daemon's redirect) would
    otherwise leave them writing to a closed file."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(level: str = "info", fmt: Format = "json") -> None:
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=_CurrentStderr()),  # type: ignore[arg-type]
        # Cached (it matters on hot paths): the CLI configures for offline commands, services
        # configure again with their flags before anything has logged.
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=max(numeric, logging.WARNING), stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")
