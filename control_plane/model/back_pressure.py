"""A route's ``backPressure``: client-side throttling of its backend services (Envoy's
admission control), refusing a growing share of requests while they fail."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from servicekit.durations import Duration, Millis
from servicekit.model import Model
from control_plane.model.declared_rules import DurationWithin, enforce
from control_plane.model.shared_types import STATUS_CODE, cel, status_code_as_text, unique


BACK_PRESSURE_FAILURES = ("5xx",)
"""What ``backPressure.failOn`` may name besides single status codes (400-599)."""


def _back_pressure_failure(value: str) -> str:
    if value in BACK_PRESSURE_FAILURES or (STATUS_CODE.match(value) and 400 <= int(value) <= 599):
        return value
    raise ValueError(f"{value!r} is not 5xx or a status code from 400 to 599")

_WINDOW = DurationWithin("window", 1000, 600_000)


class BackPressure(Model):
    """Client-side throttling (Envoy's admission control, the Google SRE book's adaptive
    throttling) of the route's backend services: when the share of successful answers over
    the last ``window`` falls below ``successRateThreshold`` percent, the gateway refuses a
    growing share of requests itself (503 ``back_pressure``) instead of sending them, at
    most ``maxRejectionProbability`` percent, and never while the service gets fewer than
    ``minRequestsPerSecond`` on average. ``aggression`` (at least 1) makes refusals start
    sooner as the success rate falls. ``failOn``: the answers that count as failures;
    resets and timeouts always do. Counted per backend service port and per Envoy worker,
    so routes to the same service port must agree on it."""

    model_config = cel(_WINDOW)

    success_rate_threshold: Annotated[int, Field(ge=1, le=100)] = 95
    window: Duration = Millis(30_000)
    aggression: Annotated[float, Field(ge=1, le=10)] = 1.0
    max_rejection_probability: Annotated[int, Field(ge=1, le=100)] = 80
    min_requests_per_second: Annotated[int, Field(ge=0, le=1_000_000)] = 0
    fail_on: Annotated[
        list[Annotated[str, BeforeValidator(status_code_as_text), AfterValidator(_back_pressure_failure)]],
        AfterValidator(unique),
        Field(min_length=1, max_length=32),
    ] = ["5xx", "429"]

    def __hash__(self) -> int:
        # A cluster's merged policy is a dict key; the list field would make it unhashable.
        return hash((self.success_rate_threshold, self.window, self.aggression, self.max_rejection_probability,
                     self.min_requests_per_second, tuple(self.fail_on)))

    @model_validator(mode="after")
    def _window(self) -> BackPressure:
        enforce(self, (_WINDOW,))
        return self
