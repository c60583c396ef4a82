"""A route's ``shield``: a per-Envoy token bucket (Envoy's local_ratelimit) in front of
everything else on the route."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from servicekit.model import Model
from control_plane.model.shared_types import cel


class Shield(Model):
    """A per-Envoy token bucket (Envoy's local_ratelimit) cutting a flood with 429 before
    ext_authz and the global rate-limit service see it: ``requestsPerSecond`` refill and
    ``burst`` capacity (default: ``requestsPerSecond``), counted per Envoy instance."""

    model_config = cel(
        ("!has(self.burst) || self.burst >= self.requestsPerSecond", "burst must be at least requestsPerSecond"),
    )

    requests_per_second: Annotated[int, Field(ge=1, le=1_000_000)]
    burst: Annotated[int, Field(ge=1, le=1_000_000)] | None = None

    @model_validator(mode="after")
    def _burst(self) -> Shield:
        if self.burst is not None and self.burst < self.requests_per_second:
            raise ValueError(
                f"shield: burst ({self.burst}) must be at least requestsPerSecond ({self.requests_per_second})"
            )
        return self
