"""A route's ``timeouts``: connect, request, perTry and idle, checked as a hierarchy
(connect < perTry <= request <= idle), with the defaults the translator applies."""

from __future__ import annotations

from pydantic import model_validator

from servicekit.durations import Duration, human_duration_ms
from servicekit.model import Model
from control_plane.model.shared_types import cel

CONNECT_TIMEOUT_MS = 3_000
"""A cluster's connect timeout unless a route using it sets ``timeouts.connect``."""
REQUEST_TIMEOUT_MS = 10_000
"""A route's whole-request timeout unless it sets ``timeouts.request``."""
PER_TRY_TIMEOUT_MS = 8_000
"""Each attempt's timeout on a route with retries, unless it sets ``timeouts.perTry``
(and only when the request timeout leaves room for it)."""
_DEFAULT_REQUEST = human_duration_ms(REQUEST_TIMEOUT_MS)


def _named(field: str, ms: int, default: bool = False) -> str:
    return f"{field} ({human_duration_ms(ms)}{', the default' if default else ''})"


class Timeouts(Model):
    """The hierarchy, checked: connect < perTry <= request <= idle.

    ``connect`` is the backend cluster's connect timeout (shared by every route to that
    service port); ``idle`` is the stream idle timeout for this route.
    """

    model_config = cel(
        (
            "!has(self.perTry) || !has(self.request) || duration(self.perTry) <= duration(self.request)",
            "perTry must not exceed request",
        ),
        (
            f"!has(self.perTry) || has(self.request) || duration(self.perTry) <= duration('{_DEFAULT_REQUEST}')",
            f"perTry must not exceed request ({_DEFAULT_REQUEST}, the default)",
        ),
        (
            f"!has(self.idle) || duration(self.idle) >= (has(self.request) ? duration(self.request) : duration('{_DEFAULT_REQUEST}'))",
            "request must not exceed idle",
        ),
        (
            "!has(self.connect) || duration(self.connect) < (has(self.perTry) ? duration(self.perTry)"
            f" : has(self.request) ? duration(self.request) : duration('{_DEFAULT_REQUEST}'))",
            "connect must be less than perTry and request",
        ),
    )

    connect: Duration | None = None
    request: Duration | None = None
    per_try: Duration | None = None
    idle: Duration | None = None

    @model_validator(mode="after")
    def _hierarchy(self) -> Timeouts:
        request = self.request if self.request is not None else REQUEST_TIMEOUT_MS
        default_request = self.request is None
        if self.per_try is not None and self.per_try > request:
            raise ValueError(
                f"{_named('perTry', self.per_try)} must not exceed {_named('request', request, default_request)}"
            )
        if self.idle is not None and request > self.idle:
            raise ValueError(f"{_named('request', request, default_request)} must not exceed {_named('idle', self.idle)}")
        if self.connect is not None:
            if self.per_try is not None and self.connect >= self.per_try:
                raise ValueError(f"{_named('connect', self.connect)} must be less than {_named('perTry', self.per_try)}")
            if self.connect >= request:
                raise ValueError(
                    f"{_named('connect', self.connect)} must be less than {_named('request', request, default_request)}"
                )
        return self


NO_TIMEOUTS = Timeouts()
"""``RouteSpec.timeouts``'s default (shared: models are frozen)."""


def check_connect_timeout(timeouts: Timeouts, *, retried: bool) -> None:
    """With retries and no ``perTry``, each try gets ``PER_TRY_TIMEOUT_MS`` (when the request
    timeout leaves room), and ``connect`` must fit in it; ValueError."""
    request = timeouts.request if timeouts.request is not None else REQUEST_TIMEOUT_MS
    default_per_try = retried and timeouts.per_try is None and request > PER_TRY_TIMEOUT_MS
    if default_per_try and timeouts.connect is not None and timeouts.connect >= PER_TRY_TIMEOUT_MS:
        raise ValueError(
            f"timeouts: connect ({human_duration_ms(timeouts.connect)}) must be less than perTry "
            f"({human_duration_ms(PER_TRY_TIMEOUT_MS)}, the default with retries); set timeouts.perTry"
        )
