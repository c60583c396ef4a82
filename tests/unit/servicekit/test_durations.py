"""Durations ("250ms", "1m30s") and rates ("1/10s") in route YAML."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import yaml
from pydantic import BaseModel

from control_plane.config import ControlPlaneConfig
from control_plane.model.schema import RouteSpec
from ext_authz.config import ExtAuthzConfig
from ratelimit_svc.config import RateLimitConfig
from servicekit.durations import (
    MAX_DURATION_MS,
    Millis,
    format_duration_ms,
    human_duration_ms,
    parse_duration_ms,
    parse_rate,
)


@pytest.mark.parametrize(
    "text, ms",
    [
        ("1ms", 1),
        ("250ms", 250),
        ("10s", 10_000),
        ("1.5s", 1_500),
        ("0.25s", 250),
        ("1m", 60_000),
        ("1m30s", 90_000),
        ("1h", 3_600_000),
        ("1h1m1s1ms", 3_661_001),
        ("1.5ms", 2),
    ],
)
def test_parse_duration(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["10", "10S", "10 s", " 10s", "10s ", "s", "1d", "1.s", ".5s", "-1s", "1e3ms", ""])
def test_not_a_duration(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration; use forms like 250ms, 10s, 1m30s, 1h"):
        parse_duration_ms(text)


@pytest.mark.parametrize("text", ["0s", "0ms", "0.4ms", "0h0m"])
def test_zero_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="must be longer than 0ms"):
        parse_duration_ms(text)


@pytest.mark.parametrize("value", [10, 1.5, None, ["1s"]])
def test_non_strings_are_refused(value: object) -> None:
    with pytest.raises(ValueError):
        parse_duration_ms(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "ms, envoy",
    [(1, "0.001s"), (250, "0.250s"), (1_000, "1s"), (1_500, "1.500s"), (90_000, "90s"), (3_600_000, "3600s")],
)
def test_format_for_envoy(ms: int, envoy: str) -> None:
    assert format_duration_ms(ms) == envoy


@pytest.mark.parametrize(
    "ms, human", [(1, "1ms"), (1_500, "1500ms"), (10_000, "10s"), (90_000, "90s"), (120_000, "2m"), (7_200_000, "2h")]
)
def test_human_form_round_trips(ms: int, human: str) -> None:
    assert human_duration_ms(ms) == human
    assert parse_duration_ms(human) == ms


@pytest.mark.parametrize("text, rate", [("1/10s", (1, 10_000)), ("100/1m", (100, 60_000)), ("5/250ms", (5, 250))])
def test_parse_rate(text: str, rate: tuple[int, int]) -> None:
    assert parse_rate(text) == rate


@pytest.mark.parametrize("text", ["1/s", "10s", "1/10", "/10s", "-1/10s", "1.5/10s", "1 / 10s"])
def test_not_a_rate(text: str) -> None:
    with pytest.raises(ValueError, match="is not a rate; use forms like 1/10s or 100/1m"):
        parse_rate(text)


def test_rate_needs_a_token_and_a_period() -> None:
    with pytest.raises(ValueError, match="must refill at least one token"):
        parse_rate("0/10s")
    with pytest.raises(ValueError, match="must be longer than 0ms"):
        parse_rate("1/0s")


# --- the 30-day cap ---------------------------------------------------------------------
# Without a cap, "100000000h" passed the schema and then broke translation (protobuf's
# Duration ends at 315576000000s). 30 days is longer than any timeout or window makes sense.


@pytest.mark.parametrize("text", ["720h", "43200m", "2592000s", "719h59m59s999ms", "719.5h"])
def test_up_to_30_days_is_accepted(text: str) -> None:
    assert parse_duration_ms(text) <= MAX_DURATION_MS == 30 * 24 * 3_600_000


@pytest.mark.parametrize("text", ["721h", "720h1ms", "2592000001ms", "100000000h", "99999999999999999999h"])
def test_longer_than_30_days_is_refused(text: str) -> None:
    with pytest.raises(ValueError) as excinfo:
        parse_duration_ms(text)
    assert str(excinfo.value) == f"{text!r} is longer than the maximum of 720h"


def test_the_cap_applies_to_rate_periods_too() -> None:
    assert parse_rate("1/720h") == (1, MAX_DURATION_MS)
    with pytest.raises(ValueError, match="'721h' is longer than the maximum of 720h"):
        parse_rate("1/721h")


# --- Millis: what a Duration field holds ------------------------------------------------


def test_millis_is_an_int_of_milliseconds_that_knows_its_seconds() -> None:
    value = parse_duration_ms("1m30s")
    assert type(value) is Millis
    assert value == 90_000 and hash(value) == hash(90_000) and value < 90_001
    assert value.seconds == 90.0 and Millis(250).seconds == 0.25
    assert repr(value) == "90000" and json.dumps({"ms": value}) == '{"ms": 90000}'
    assert format_duration_ms(value) == "90s"
    assert type(value + 1) is int, "arithmetic gives plain ints; only parsed values are durations"


def test_a_loaded_config_holds_millis_and_round_trips_as_before() -> None:
    config = ControlPlaneConfig.model_validate({"sources": {}, "debounce": {"quiet": "30ms"}})
    assert type(config.debounce.quiet) is Millis and config.debounce.quiet.seconds == 0.03
    assert type(config.debounce.max_delay) is Millis, "a default is a Millis too"
    dumped = config.model_dump(by_alias=True, mode="json")
    assert dumped["debounce"] == {"quiet": "30ms", "maxDelay": "250ms"}
    assert ControlPlaneConfig.model_validate(yaml.safe_load(yaml.safe_dump(dumped))) == config


def _duration_defaults(model: type[BaseModel], seen: set[type[BaseModel]]) -> Iterator[tuple[str, object]]:
    if model in seen:
        return
    seen.add(model)
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if (annotation is Millis or Millis in getattr(annotation, "__args__", ())) and not field.is_required():
            yield f"{model.__name__}.{name}", field.default
        for candidate in [annotation, *getattr(annotation, "__args__", ())]:
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                yield from _duration_defaults(candidate, seen)


@pytest.mark.parametrize("model", [ControlPlaneConfig, RouteSpec, ExtAuthzConfig, RateLimitConfig])
def test_every_duration_default_is_millis(model: type[BaseModel]) -> None:
    """Defaults are not validated, so `timeout: Duration = 250` would hold a bare int whose
    `.seconds` fails at run time; mypy refuses it, and so does this."""
    defaults = dict(_duration_defaults(model, set()))
    assert defaults, "the walk found no Duration field"
    assert {name: d for name, d in defaults.items() if d is not None and type(d) is not Millis} == {}
