"""A route's ``healthCheck``: active HTTP health checks of the backend cluster's hosts."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from servicekit.durations import Duration, Millis, human_duration_ms
from servicekit.model import Model
from control_plane.model.shared_types import PathPrefix, cel


class HealthCheck(Model):
    """Active HTTP health checks: GET ``path`` every ``interval``; 200 is healthy."""

    model_config = cel(("!has(self.timeout) || !has(self.interval) || duration(self.timeout) <= duration(self.interval)",
                        "timeout must not exceed interval"))

    path: Annotated[PathPrefix, Field(max_length=1024)]
    interval: Duration = Millis(5000)
    timeout: Duration = Millis(1000)
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
