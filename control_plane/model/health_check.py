"""A route's ``healthCheck``: active HTTP health checks of the backend cluster's hosts."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from servicekit.durations import Duration, Millis, human_duration_ms
from servicekit.model import Model
from control_plane.model.shared_types import PathPrefix, cel

DEFAULT_INTERVAL_MS = 5_000
DEFAULT_TIMEOUT_MS = 1_000


class HealthCheck(Model):
    """Active HTTP health checks: GET ``path`` every ``interval``; 200 is healthy."""

    # Unset fields compare as their defaults, as in Python.
    model_config = cel(
        (
            f"(has(self.timeout) ? duration(self.timeout) : duration('{human_duration_ms(DEFAULT_TIMEOUT_MS)}'))"
            f" <= (has(self.interval) ? duration(self.interval) : duration('{human_duration_ms(DEFAULT_INTERVAL_MS)}'))",
            "timeout must not exceed interval",
        ),
    )

    path: Annotated[PathPrefix, Field(max_length=1024)]
    interval: Duration = Millis(DEFAULT_INTERVAL_MS)
    timeout: Duration = Millis(DEFAULT_TIMEOUT_MS)
    healthy_threshold: Annotated[int, Field(ge=1, le=1000)] = 2
    unhealthy_threshold: Annotated[int, Field(ge=1, le=1000)] = 3

    @model_validator(mode="after")
    def _timeout_within_interval(self) -> HealthCheck:
        if self.timeout > self.interval:
            raise ValueError(
                f"healthCheck.timeout ({human_duration_ms(self.timeout)}) must not exceed "
                f"healthCheck.interval ({human_duration_ms(self.interval)})"
            )
        return self
