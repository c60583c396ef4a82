"""A route's ``rateLimits``: each a key (user, ip, apiKey, a header) and an algorithm,
counted in Redis by the rate-limit service or the route's HTTP check."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from servicekit.durations import Duration, Rate
from servicekit.model import Model
from control_plane.model.shared_types import cel


class RateLimit(Model):
    model_config = cel(
        (
            "has(self.algorithm) && self.algorithm == 'tokenBucket'"
            " ? has(self.capacity) && has(self.refill) && !has(self.limit) && !has(self.window)"
            " : has(self.limit) && has(self.window) && !has(self.capacity) && !has(self.refill)",
            "tokenBucket takes capacity and refill; slidingWindow and fixedWindow take limit and window",
        )
    )

    key: Annotated[str, Field(pattern=r"^(user|ip|apiKey|header:[a-z0-9!#$%&'*+.^_`|~-]+)$")]
    algorithm: Literal["slidingWindow", "tokenBucket", "fixedWindow"] = "slidingWindow"
    limit: Annotated[int, Field(ge=1)] | None = None
    window: Duration | None = None
    capacity: Annotated[int, Field(ge=1)] | None = None
    refill: Rate | None = None
    shadow: bool = False
    """Count and report, never deny."""
    mode: Literal["exact", "hybrid"] = "exact"
    """exact: every decision asks Redis; hybrid: each instance serves from batches it reserves."""
    on_store_failure: Literal["local", "open", "closed"] = "local"
    """When Redis cannot answer: local buckets (limit ÷ expected instances), allow, or deny."""

    @model_validator(mode="after")
    def _fields_for_algorithm(self) -> RateLimit:
        if self.algorithm == "tokenBucket":
            if self.capacity is None or self.refill is None:
                raise ValueError("tokenBucket needs capacity and refill")
            if self.limit is not None or self.window is not None:
                raise ValueError("tokenBucket takes capacity and refill, not limit and window")
        else:
            if self.limit is None or self.window is None:
                raise ValueError(f"{self.algorithm} needs limit and window")
            if self.capacity is not None or self.refill is not None:
                raise ValueError(f"{self.algorithm} takes limit and window, not capacity and refill")
        return self
