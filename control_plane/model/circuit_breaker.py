"""A route's breakers: ``circuitBreaker`` (Envoy's thresholds on the backend cluster, and
with ``errorRate`` the route's three-state breaker, judged from the access-log stream by
``control_plane/breakers``) and ``fallback``, what the route answers while that breaker
is open."""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from servicekit.durations import Duration, Millis
from servicekit.model import Model
from control_plane.model.backends import Backend
from control_plane.model.declared_rules import DurationWithin, ExactlyOne, Requires, enforce
from control_plane.model.shared_types import (
    STATUS_CODE,
    HeaderValue,
    SettableHeaderName,
    cel,
    status_code_as_text,
    unique,
)

BREAKER_FAILURES = ("5xx", "reset", "timeout", "connect-failure")
"""What ``errorRate.failOn`` may name besides single status codes (400-599)."""


def _breaker_failure(value: str) -> str:
    if value in BREAKER_FAILURES or (STATUS_CODE.match(value) and 400 <= int(value) <= 599):
        return value
    raise ValueError(f"{value!r} is not one of {', '.join(BREAKER_FAILURES)} or a status code from 400 to 599")


_ERROR_RATE_RULES = (
    ExactlyOne("window", "windowCalls"),
    Requires("slowCallRateThreshold", "slowCallDuration", "slowCallRateThreshold needs slowCallDuration"),
    DurationWithin("window", 1000, 600_000),
    DurationWithin("slowCallDuration", 1, 3_600_000),
    DurationWithin("waitInOpen", 1000, 3_600_000),
)


class ErrorRate(Model):
    """The three-state breaker (CLOSED, OPEN, HALF_OPEN) of Resilience4j, judged from the
    access-log stream over every gateway: one downstream request is one call, however many
    times Envoy retried it.

    The window is either a time (``window``) or the last ``windowCalls`` calls. The breaker
    opens when, with at least ``minimumCalls`` calls in the window, the failure rate reaches
    ``failureRateThreshold`` percent, or (with ``slowCallDuration``) the share of calls
    slower than it reaches ``slowCallRateThreshold`` percent. After ``waitInOpen`` it lets
    ``halfOpenProbes`` requests through per gateway: all succeed, CLOSED; one fails, OPEN.
    """

    model_config = cel(*_ERROR_RATE_RULES)

    window: Duration | None = None
    window_calls: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    minimum_calls: Annotated[int, Field(ge=1, le=1_000_000)] = 20
    failure_rate_threshold: Annotated[int, Field(ge=1, le=100)] = 50
    slow_call_duration: Duration | None = None
    slow_call_rate_threshold: Annotated[int, Field(ge=1, le=100)] | None = None
    """Percent; defaults to 100 when ``slowCallDuration`` is set (Resilience4j's default)."""
    wait_in_open: Duration = Millis(30_000)
    half_open_probes: Annotated[int, Field(ge=1, le=1000)] = 3
    fail_on: Annotated[
        list[Annotated[str, BeforeValidator(status_code_as_text), AfterValidator(_breaker_failure)]],
        AfterValidator(unique),
        Field(min_length=1, max_length=32),
    ] = ["5xx", "reset", "timeout", "connect-failure"]

    @model_validator(mode="after")
    def _one_window(self) -> ErrorRate:
        enforce(self, _ERROR_RATE_RULES)
        return self


class CircuitBreaker(Model):
    """The service's bulkhead: Envoy's thresholds on its cluster, once per routing priority;
    and, with ``errorRate``, the route's three-state breaker.

    Unset limits keep Envoy's defaults (1024 each). Without ``maxRetries`` the cluster gets
    a retry budget (20% of active requests, at least 3 concurrent retries) instead of a
    fixed cap; with it, the fixed cap replaces the budget.
    """

    max_connections: Annotated[int, Field(ge=1, le=1_000_000_000)] | None = None
    max_pending_requests: Annotated[int, Field(ge=1, le=1_000_000_000)] | None = None
    max_requests: Annotated[int, Field(ge=1, le=1_000_000_000)] | None = None
    max_retries: Annotated[int, Field(ge=0, le=1_000_000_000)] | None = None
    error_rate: ErrorRate | None = None


class FallbackResponse(Model):
    """A static answer. The body is text so that the CRD schema stays structural; with the
    default content type it must be a JSON document."""

    status: Annotated[int, Field(ge=200, le=599)] = 200
    headers: dict[SettableHeaderName, HeaderValue] = Field(default_factory=dict, max_length=32)
    body: Annotated[str, Field(max_length=65_536)] = "{}"
    content_type: HeaderValue = "application/json"

    @model_validator(mode="after")
    def _json_body(self) -> FallbackResponse:
        if self.content_type.split(";")[0].strip().lower() == "application/json":
            try:
                json.loads(self.body)
            except ValueError as error:
                raise ValueError(f"body: not a JSON document ({error}); set contentType for another kind") from None
        if "content-type" in self.headers:
            raise ValueError("headers: set content-type with contentType")
        return self


_ONE_FALLBACK = ExactlyOne("response", "backend", "circuitOpen")


class Fallback(Model):
    """What a route answers while its breaker is OPEN (and to requests a HALF_OPEN breaker
    does not admit as probes): exactly one of a static ``response``, a fallback ``backend``,
    or ``circuitOpen`` (a JSON 503 ``circuit_open`` with ``Retry-After``; the default, and
    the right one where a stale answer is wrong, such as payments)."""

    model_config = cel(_ONE_FALLBACK)

    response: FallbackResponse | None = None
    backend: Backend | None = None
    circuit_open: Literal[True] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Fallback:
        enforce(self, (_ONE_FALLBACK,))
        return self


FALLBACK_SPEC_RULES = (
    (
        "!has(self.fallback) || (has(self.circuitBreaker) && has(self.circuitBreaker.errorRate))",
        "fallback: a fallback is served only by a breaker; set circuitBreaker.errorRate",
    ),
)
"""The CEL form, on ``RouteSpec``, of ``check_fallback``."""


def check_fallback(fallback: Fallback | None, circuit_breaker: CircuitBreaker | None) -> None:
    """A fallback needs the breaker that serves it; ValueError."""
    if fallback is not None and (circuit_breaker is None or circuit_breaker.error_rate is None):
        raise ValueError("fallback: a fallback is served only by a breaker; set circuitBreaker.errorRate")
