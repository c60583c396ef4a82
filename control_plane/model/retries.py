"""A route's ``retries``: how many, on which conditions, and which methods may be retried
(idempotent ones; POST and PATCH only with an idempotency key)."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from servicekit.model import Model
from control_plane.model.match import Match
from control_plane.model.shared_types import STATUS_CODE, HeaderName, cel_list, status_code_as_text, unique

IDEMPOTENT_METHODS = ("GET", "HEAD", "OPTIONS", "PUT", "DELETE")
KEYED_METHODS = ("POST", "PATCH")
"""Retried only when the request carries the route's ``retries.idempotencyKeyHeader``."""
RETRY_CONDITIONS = (
    "connect-failure",
    "reset",
    "refused-stream",
    "5xx",
    "gateway-error",
    "retriable-4xx",
    "envoy-ratelimited",
)


def _retry_condition(value: str) -> str:
    if value not in RETRY_CONDITIONS and not STATUS_CODE.match(value):
        allowed = ", ".join(RETRY_CONDITIONS)
        raise ValueError(f"{value!r} is not a retry condition; use one of {allowed} or a status code like \"503\"")
    return value


class Retries(Model):
    """Named ``retryOn`` (as in Istio), not ``on``: YAML 1.1 readers such as kubectl turn an
    unquoted ``on`` key into the boolean ``true``."""

    attempts: Annotated[int, Field(ge=0, le=10)] = 1
    retry_on: Annotated[
        list[Annotated[str, BeforeValidator(status_code_as_text), AfterValidator(_retry_condition)]],
        AfterValidator(unique),
        Field(max_length=16),
    ] = ["connect-failure", "refused-stream", "reset"]
    idempotency_key_header: HeaderName | None = None
    """POST and PATCH are retried too, but only when the request carries this header."""

    @model_validator(mode="before")
    @classmethod
    def _explain_on(cls, data: object) -> object:
        if isinstance(data, dict):
            for key in ("on", "true", True):
                if key in data:
                    raise ValueError(
                        f"retryOn: found the key {key!r}; the field is named retryOn "
                        "(an unquoted `on` key is the boolean true in YAML 1.1, as kubectl reads it)"
                    )
        return data


RETRIES_SPEC_RULES = (
    (
        "!has(self.retries) || (has(self.retries.attempts) && self.retries.attempts == 0)"
        " || !has(self.match.methods) || size(self.match.methods) == 0"
        f" || self.match.methods.exists(m, m in {cel_list(IDEMPOTENT_METHODS)})"
        f" || (has(self.retries.idempotencyKeyHeader) && self.match.methods.exists(m, m in {cel_list(KEYED_METHODS)}))",
        "retries apply to GET, HEAD, OPTIONS, PUT and DELETE only (POST and PATCH with "
        "retries.idempotencyKeyHeader); this route matches none of them",
    ),
)
"""The CEL form, on ``RouteSpec``, of ``check_retried_methods``."""


def check_retried_methods(retries: Retries | None, match: Match) -> None:
    """Retries on a route that only takes methods never retried are a mistake; ValueError."""
    if retries is not None and retries.attempts > 0 and match.methods:
        retriable = set(IDEMPOTENT_METHODS)
        if retries.idempotency_key_header is not None:
            retriable |= set(KEYED_METHODS)
        if not set(match.methods) & retriable:
            methods = ", ".join(match.methods)
            raise ValueError(
                f"retries: the route only matches non-idempotent methods ({methods}); "
                "retries apply to GET, HEAD, OPTIONS, PUT and DELETE only "
                "(POST and PATCH too with retries.idempotencyKeyHeader)"
            )
