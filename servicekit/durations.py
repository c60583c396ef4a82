"""Human durations ("250ms", "10s", "1m30s") and rates ("1/10s") as used in route YAML.

Durations are held as integer milliseconds so that comparisons (perTry ≤ request) and
the Envoy JSON form ("0.250s") are exact. A ``Duration`` field holds a ``Millis``: an
``int`` of milliseconds (it compares, hashes, prints and serialises as that int) that
also says what it is in seconds (``.seconds``, for asyncio and client timeouts), so no
caller divides by 1000 itself; ``format_duration_ms`` gives Envoy's form ("0.250s").
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, GetCoreSchemaHandler, PlainSerializer, WithJsonSchema
from pydantic_core import CoreSchema, core_schema

_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
MAX_DURATION_MS = 30 * 24 * 3_600_000
"""30 days: longer than any timeout or window makes sense, far inside protobuf's range."""
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
RATE_PATTERN = r"^[0-9]+/([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"


class Millis(int):
    """A duration in whole milliseconds; an ``int`` everywhere an int is expected."""

    __slots__ = ()

    @property
    def seconds(self) -> float:
        return self / 1000

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        # Validated as a strict int, then wrapped; a default (never validated) is written
        # Millis(...). Serialised as the int, which Duration's serializer overrides.
        return core_schema.no_info_after_validator_function(
            cls, core_schema.int_schema(strict=True), serialization=core_schema.plain_serializer_function_ser_schema(int)
        )


def parse_duration_ms(text: str) -> Millis:
    """Parse "1m30s" → 90000. Raises ValueError with the accepted forms."""
    if not isinstance(text, str) or len(text) > 32 or not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(f"{text!r} is not a duration; use forms like 250ms, 10s, 1m30s, 1h")
    total = 0.0
    for number, unit in _PART.findall(text):
        total += float(number) * _UNIT_MS[unit]
    ms = Millis(round(total))
    if ms <= 0:
        raise ValueError(f"{text!r} must be longer than 0ms")
    if ms > MAX_DURATION_MS:
        raise ValueError(f"{text!r} is longer than the maximum of {human_duration_ms(MAX_DURATION_MS)}")
    return ms


def format_duration_ms(ms: int) -> str:
    """Milliseconds → the protobuf JSON Duration form Envoy expects ("0.250s")."""
    seconds, rest = divmod(ms, 1000)
    return f"{seconds}.{rest:03d}s" if rest else f"{seconds}s"


def human_duration_ms(ms: int) -> str:
    """Milliseconds → the shortest YAML form, for messages and round trips."""
    for unit in ("h", "m", "s"):
        size = _UNIT_MS[unit]
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def _duration_from_yaml(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("a duration must be a string like 10s")
    if isinstance(value, (int, float)):
        raise ValueError(f"{value!r} has no unit; write it as {value}s or {value}ms")
    return parse_duration_ms(value)


Duration = Annotated[
    Millis,
    BeforeValidator(_duration_from_yaml),
    PlainSerializer(human_duration_ms, return_type=str),
    WithJsonSchema({"type": "string", "pattern": DURATION_PATTERN, "maxLength": 32}),
]
"""A duration in YAML ("250ms"); a ``Millis`` (an int of milliseconds) in Python."""


def parse_rate(text: str) -> tuple[int, int]:
    """Parse "1/10s" → (1 token, 10000 ms)."""
    if not isinstance(text, str) or not re.fullmatch(RATE_PATTERN, text):
        raise ValueError(f"{text!r} is not a rate; use forms like 1/10s or 100/1m")
    count, _, period = text.partition("/")
    tokens = int(count)
    if tokens <= 0:
        raise ValueError(f"{text!r} must refill at least one token")
    return tokens, parse_duration_ms(period)


def _rate_from_yaml(value: Any) -> Any:
    if isinstance(value, tuple):
        return value
    return parse_rate(value)


def _rate_to_yaml(value: tuple[int, int]) -> str:
    return f"{value[0]}/{human_duration_ms(value[1])}"


Rate = Annotated[
    tuple[int, int],
    BeforeValidator(_rate_from_yaml),
    PlainSerializer(_rate_to_yaml, return_type=str),
    WithJsonSchema({"type": "string", "pattern": RATE_PATTERN, "maxLength": 40}),
]
"""A refill rate in YAML ("1/10s"); (tokens, period in ms) in Python."""
