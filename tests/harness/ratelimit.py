"""ratelimit_svc as a real process (`python -m gatehouse ratelimit`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .service import GatehouseService


class RateLimitServiceProcess(GatehouseService):
    """The config is written at start, once the control plane's xDS port is known."""

    command = "ratelimit"

    def __init__(self, directory: Path, *, redis_url: str, name: str = "ratelimit", extra: dict[str, Any] | None = None) -> None:
        super().__init__(directory, name=name, extra=extra)
        self.redis_url = redis_url

    def start(self, xds_port: int, timeout: float = 30.0) -> RateLimitServiceProcess:
        self._launch({
            "redis": {"url": self.redis_url, "timeout": "50ms"},
            "policies": {"xds": {"address": f"127.0.0.1:{xds_port}", "nodeId": self.name}},
        }, timeout)
        return self
