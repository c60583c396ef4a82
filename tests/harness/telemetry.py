"""The telemetry service as a real process (`python -m gatehouse telemetry`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .service import GatehouseService


class TelemetryServiceProcess(GatehouseService):
    command = "telemetry"

    def __init__(self, directory: Path, *, sink: dict[str, Any], name: str = "telemetry",
                 extra: dict[str, Any] | None = None) -> None:
        super().__init__(directory, name=name, extra=extra)
        self.sink = sink

    def start(self, timeout: float = 30.0) -> TelemetryServiceProcess:
        self._launch({"sink": self.sink, "audit": {"spoolDir": str(self.directory / "spool")}}, timeout)
        return self
