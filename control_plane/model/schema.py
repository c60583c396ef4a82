"""The route schema: one definition for Git files, CRDs and the chart's OpenAPI schema.

Models are strict (unknown fields are errors, no type coercion) and immutable. Field
names follow the YAML (camelCase); the Python attribute names are snake_case.
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, WithJsonSchema, model_validator

from servicekit.check_contract import (
    ENVOY_PREFIX,
    IDENTITY_HEADERS,
    INTERNAL_PREFIX,
    VOUCHED_HEADERS,
    reserved_for_routes,
    unmatchable,
)
from servicekit.durations import Duration, Millis, Rate, human_duration_ms
from servicekit.model import Model
from control_plane.model.paths import MAX_VARIABLES, check_re2, parse_path
from control_plane.model.waiting_room import WaitingRoom
from control_plane.model.api_keys import Consumers, check_api_keys
from control_plane.model.upstream_token import UPSTREAM_TOKEN_PUBLIC, UpstreamToken
from control_plane.model.validation import Validation

API_VERSION = "gatehouse.io/v1alpha1"
KIND = "Route"

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_HOST = re.compile(rf"^(\*\.)?{_DNS_LABEL}(\.{_DNS_LABEL})*$")
_HEADER_NAME = re.compile(r"^[a-z0-9!#$%&'*+.^_`|~-]+$")
_SERVICE = re.compile(rf"^{_DNS_LABEL}$")
_OBJECT_NAME = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")
_STATUS_CODE = re.compile(r"^[1-5][0-9][0-9]$")

METHODS = ("GET", "HEAD", "OPTIONS", "PUT", "DELETE", "POST", "PATCH", "TRACE", "CONNECT")
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
Method = Literal["GET", "HEAD", "OPTIONS", "PUT", "DELETE", "POST", "PATCH", "TRACE", "CONNECT"]


def cel(*rules: tuple[str, str]) -> ConfigDict:
    """The CRD's CEL form of a model's cross-field rules, kept next to the Python check.

    The API server refuses what these catch before it is stored; the Python validators
    stay authoritative (Git files never meet the API server).
    """
    return ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [{"rule": rule, "message": message} for rule, message in rules]}
    )


def _one_of(*fields: str) -> str:
    return "[" + ", ".join(f"has(self.{f})" for f in fields) + "].filter(x, x).size() == 1"


def _host(value: str) -> str:
    if value != "*" and not _HOST.match(value):
        raise ValueError(f"{value!r} is not a lowercase DNS name (a leading '*.' wildcard is allowed)")
    return value


def _header_name(value: str) -> str:
    if not _HEADER_NAME.match(value):
        raise ValueError(f"{value!r} is not a lowercase HTTP header name")
    return value


def _settable_header(value: str) -> str:
    _header_name(value)
    if value == "host":
        raise ValueError("'host' cannot be set with headers; it is the routing key")
    return value


def _cel_list(names: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{name}'" for name in names) + "]"


_RESERVED_CEL = (
    f"!({{k}} in {_cel_list(VOUCHED_HEADERS)}) && !{{k}}.startsWith('{INTERNAL_PREFIX}') && !{{k}}.startsWith('{ENVOY_PREFIX}')"
)
"""The CEL form of ``check_contract.reserved_for_routes``, for a name ``{k}``."""
_RESERVED_MESSAGE = (
    f"headers.request: {', '.join(VOUCHED_HEADERS)}, {INTERNAL_PREFIX}* and {ENVOY_PREFIX}* are the gateway's; "
    "a route may not set or remove them"
)
_UNMATCHABLE_MESSAGE = (
    f"match.headers: {', '.join(IDENTITY_HEADERS)} and {INTERNAL_PREFIX}* cannot select a route: "
    "a route is chosen before the client's copy is removed"
)


def _request_header(value: str) -> str:
    _header_name(value)
    reason = reserved_for_routes(value)
    if reason is not None:
        raise ValueError(reason)
    return value


def _matchable_header(value: str) -> str:
    _header_name(value)
    reason = unmatchable(value)
    if reason is not None:
        raise ValueError(reason)
    return value


def _header_value(value: str) -> str:
    if any(ch in value for ch in "\r\n\x00"):
        raise ValueError("header values must not contain CR, LF or NUL")
    return value


def _regex(value: str) -> str:
    check_re2(value)
    return value


def _path(value: str) -> str:
    parse_path(value)
    return value


def _prefix(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"{value!r} must start with '/'")
    return value


def _unique(values: list[str]) -> list[str]:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise ValueError(f"{value!r} is listed twice")
        seen.add(value)
    return values


def _status_code_as_text(value: object) -> object:
    """`retryOn: [503]` unquoted is an int in YAML; it means the status code."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _retry_condition(value: str) -> str:
    if value not in RETRY_CONDITIONS and not _STATUS_CODE.match(value):
        allowed = ", ".join(RETRY_CONDITIONS)
        raise ValueError(f"{value!r} is not a retry condition; use one of {allowed} or a status code like \"503\"")
    return value


HostName = Annotated[
    str,
    AfterValidator(_host),
    WithJsonSchema({"type": "string", "maxLength": 253, "pattern": rf"^(\*|(\*\.)?{_DNS_LABEL}(\.{_DNS_LABEL})*)$"}),
]
_HEADER_SCHEMA = WithJsonSchema({"type": "string", "maxLength": 256, "pattern": _HEADER_NAME.pattern})
HeaderName = Annotated[str, AfterValidator(_header_name), _HEADER_SCHEMA]
SettableHeaderName = Annotated[str, AfterValidator(_settable_header), _HEADER_SCHEMA]
RequestHeaderName = Annotated[str, AfterValidator(_request_header), _HEADER_SCHEMA]
"""A request header a route may set or remove: not one the gateway vouches for."""
MatchableHeaderName = Annotated[str, AfterValidator(_matchable_header), _HEADER_SCHEMA]
HeaderValue = Annotated[str, AfterValidator(_header_value)]
Regex = Annotated[str, AfterValidator(_regex)]


def _dns_label(value: str) -> str:
    if len(value) > 63 or not _SERVICE.match(value):
        raise ValueError(f"{value!r} is not a DNS label (lowercase letters, digits and '-', at most 63)")
    return value


def _object_name(value: str) -> str:
    if len(value) > 253 or not _OBJECT_NAME.match(value):
        raise ValueError(f"{value!r} is not a valid name (lowercase letters, digits, '-' and '.')")
    return value


ServiceName = Annotated[
    str, AfterValidator(_dns_label), WithJsonSchema({"type": "string", "pattern": _SERVICE.pattern, "maxLength": 63})
]
Namespace = ServiceName
ObjectName = Annotated[
    str,
    AfterValidator(_object_name),
    WithJsonSchema({"type": "string", "pattern": _OBJECT_NAME.pattern, "maxLength": 253}),
]


class HeaderMatch(Model):
    """One request-header condition; exactly one of exact/prefix/regex/present."""

    model_config = cel(
        (_one_of("exact", "prefix", "regex", "present"), "set exactly one of exact, prefix, regex, present"),
        (f"!(self.name in {_cel_list(IDENTITY_HEADERS)}) && !self.name.startsWith('{INTERNAL_PREFIX}')", _UNMATCHABLE_MESSAGE),
    )

    name: MatchableHeaderName
    exact: HeaderValue | None = None
    prefix: HeaderValue | None = None
    regex: Regex | None = None
    present: bool | None = None
    invert: bool = False

    @model_validator(mode="after")
    def _one_matcher(self) -> HeaderMatch:
        chosen = [k for k in ("exact", "prefix", "regex", "present") if getattr(self, k) is not None]
        if len(chosen) != 1:
            raise ValueError(f"set exactly one of exact, prefix, regex, present (got {chosen or 'none'})")
        return self


OTHER_METHODS_NEED_METHODS = "otherMethods: reject answers 405 to the methods not in methods; set methods"


class Match(Model):
    """Which requests the route takes; exactly one of path/pathPrefix/pathRegex.

    ``otherMethods``: what a request on the route's path with a method it does not take
    gets: ``fallThrough`` (the default) lets a broader route take it, ``reject`` answers 405
    with ``Allow`` (the gateway's JSON error ``method_not_allowed``)."""

    model_config = cel(
        (_one_of("path", "pathPrefix", "pathRegex"), "set exactly one of path, pathPrefix, pathRegex"),
        (
            "!has(self.otherMethods) || self.otherMethods == 'fallThrough' || (has(self.methods) && size(self.methods) > 0)",
            OTHER_METHODS_NEED_METHODS,
        ),
    )

    path: Annotated[str, AfterValidator(_path)] | None = None
    path_prefix: Annotated[str, AfterValidator(_prefix)] | None = None
    path_regex: Regex | None = None
    methods: Annotated[list[Method], AfterValidator(_unique), Field(max_length=9)] = []
    other_methods: Literal["fallThrough", "reject"] = "fallThrough"
    headers: Annotated[list[HeaderMatch], Field(max_length=16)] = []

    @model_validator(mode="after")
    def _one_path(self) -> Match:
        chosen = [k for k in ("path", "pathPrefix", "pathRegex") if getattr(self, to_snake(k)) is not None]
        if len(chosen) != 1:
            raise ValueError(f"set exactly one of path, pathPrefix, pathRegex (got {chosen or 'none'})")
        if self.other_methods == "reject" and not self.methods:
            raise ValueError(OTHER_METHODS_NEED_METHODS)
        return self


class Backend(Model):
    service: ServiceName
    port: Annotated[int, Field(ge=1, le=65535)]
    weight: Annotated[int, Field(ge=0, le=1_000_000)] = 1
    namespace: Namespace | None = None
    """Defaults to the route's namespace."""


class Rewrite(Model):
    """Either swap the matched prefix, or apply a regex substitution to the path."""

    model_config = cel(
        ("has(self.prefix) != has(self.regex)", "set exactly one of prefix or regex"),
        ("!has(self.regex) || has(self.substitution)", "regex needs a substitution"),
        ("!has(self.prefix) || !has(self.substitution)", "substitution only goes with regex"),
    )

    prefix: Annotated[str, AfterValidator(_prefix)] | None = None
    regex: Regex | None = None
    substitution: str | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Rewrite:
        if (self.prefix is None) == (self.regex is None):
            raise ValueError("set exactly one of prefix or regex")
        if self.regex is not None and self.substitution is None:
            raise ValueError("regex needs a substitution")
        if self.prefix is not None and self.substitution is not None:
            raise ValueError("substitution only goes with regex")
        return self


class HeaderOps(Model):
    """Response headers to set and remove."""

    set: dict[SettableHeaderName, HeaderValue] = Field(default_factory=dict, max_length=64)
    remove: Annotated[list[SettableHeaderName], AfterValidator(_unique), Field(max_length=64)] = []


class RequestHeaderOps(Model):
    """Request headers to set and remove before the request goes upstream; never one the
    gateway vouches for (identity, authorization, host, x-forwarded-for, its own)."""

    model_config = cel(
        (
            f"(!has(self.set) || self.set.all(k, {_RESERVED_CEL.format(k='k')}))"
            f" && (!has(self.remove) || self.remove.all(k, {_RESERVED_CEL.format(k='k')}))",
            _RESERVED_MESSAGE,
        ),
    )

    set: dict[RequestHeaderName, HeaderValue] = Field(default_factory=dict, max_length=64)
    remove: Annotated[list[RequestHeaderName], AfterValidator(_unique), Field(max_length=64)] = []


# Defaults are shared frozen instances: pydantic would deep-copy a model default for
# every route, which was a fifth of the cost of loading 10,000 routes.
_NO_HEADER_OPS = HeaderOps()
_NO_REQUEST_HEADER_OPS = RequestHeaderOps()


class HeaderRules(Model):
    request: RequestHeaderOps = Field(default_factory=lambda: _NO_REQUEST_HEADER_OPS)
    response: HeaderOps = Field(default_factory=lambda: _NO_HEADER_OPS)


_NO_HEADER_RULES = HeaderRules()


AuthName = Annotated[str, Field(pattern=r"^\S+$", max_length=256)]
"""One audience, scope or role: no spaces (they travel to ext_authz space-separated)."""


class Auth(Model):
    model_config = cel(("!has(self.upstreamToken) || !has(self.required) || self.required", UPSTREAM_TOKEN_PUBLIC))

    required: bool = True
    audiences: Annotated[list[AuthName], Field(max_length=32)] = []
    scopes: Annotated[list[AuthName], Field(max_length=32)] = []
    roles: Annotated[list[AuthName], Field(max_length=32)] = []
    api_keys: bool = False
    """Also (or, with ``jwt: false``, only) API keys in ``x-api-key`` (``api_keys``)."""
    jwt: bool = True
    consumers: Consumers | None = None
    upstream_token: UpstreamToken | None = None
    """Token swap for a legacy upstream: control_plane/model/upstream_token.py."""

    @model_validator(mode="after")
    def _upstream_token(self) -> Auth:
        if self.upstream_token is not None and not self.required:
            raise ValueError(UPSTREAM_TOKEN_PUBLIC)
        return self


_DEFAULT_AUTH = Auth()


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


CONNECT_TIMEOUT_MS = 3_000
"""A cluster's connect timeout unless a route using it sets ``timeouts.connect``."""
REQUEST_TIMEOUT_MS = 10_000
"""A route's whole-request timeout unless it sets ``timeouts.request``."""
PER_TRY_TIMEOUT_MS = 8_000
"""Each attempt's timeout on a route with retries, unless it sets ``timeouts.perTry``
(and only when the request timeout leaves room for it)."""


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
            "!has(self.perTry) || has(self.request) || duration(self.perTry) <= duration('10s')",
            "perTry must not exceed request (10s, the default)",
        ),
        (
            "!has(self.idle) || duration(self.idle) >= (has(self.request) ? duration(self.request) : duration('10s'))",
            "request must not exceed idle",
        ),
        (
            "!has(self.connect) || duration(self.connect) < (has(self.perTry) ? duration(self.perTry)"
            " : has(self.request) ? duration(self.request) : duration('10s'))",
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


_NO_TIMEOUTS = Timeouts()


class Retries(Model):
    """Named ``retryOn`` (as in Istio), not ``on``: YAML 1.1 readers such as kubectl turn an
    unquoted ``on`` key into the boolean ``true``."""

    attempts: Annotated[int, Field(ge=0, le=10)] = 1
    retry_on: Annotated[
        list[Annotated[str, BeforeValidator(_status_code_as_text), AfterValidator(_retry_condition)]],
        AfterValidator(_unique),
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


BREAKER_FAILURES = ("5xx", "reset", "timeout", "connect-failure")
"""What ``errorRate.failOn`` may name besides single status codes (400-599)."""


def _breaker_failure(value: str) -> str:
    if value in BREAKER_FAILURES or (_STATUS_CODE.match(value) and 400 <= int(value) <= 599):
        return value
    raise ValueError(f"{value!r} is not one of {', '.join(BREAKER_FAILURES)} or a status code from 400 to 599")


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

    model_config = cel(
        ("has(self.window) != has(self.windowCalls)", "set exactly one of window or windowCalls"),
        ("!has(self.slowCallRateThreshold) || has(self.slowCallDuration)", "slowCallRateThreshold needs slowCallDuration"),
    )

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
        list[Annotated[str, BeforeValidator(_status_code_as_text), AfterValidator(_breaker_failure)]],
        AfterValidator(_unique),
        Field(min_length=1, max_length=32),
    ] = ["5xx", "reset", "timeout", "connect-failure"]

    @model_validator(mode="after")
    def _one_window(self) -> ErrorRate:
        if (self.window is None) == (self.window_calls is None):
            raise ValueError("set exactly one of window or windowCalls")
        if self.slow_call_rate_threshold is not None and self.slow_call_duration is None:
            raise ValueError("slowCallRateThreshold needs slowCallDuration")
        for name, value, low, high in (
            ("window", self.window, 1000, 600_000),
            ("slowCallDuration", self.slow_call_duration, 1, 3_600_000),
            ("waitInOpen", self.wait_in_open, 1000, 3_600_000),
        ):
            if value is not None and not low <= value <= high:
                raise ValueError(
                    f"{name} ({human_duration_ms(value)}) must be from {human_duration_ms(low)} to {human_duration_ms(high)}"
                )
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


BACK_PRESSURE_FAILURES = ("5xx",)
"""What ``backPressure.failOn`` may name besides single status codes (400-599)."""


def _back_pressure_failure(value: str) -> str:
    if value in BACK_PRESSURE_FAILURES or (_STATUS_CODE.match(value) and 400 <= int(value) <= 599):
        return value
    raise ValueError(f"{value!r} is not 5xx or a status code from 400 to 599")


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

    model_config = cel(
        (
            "!has(self.window) || (duration(self.window) >= duration('1s') && duration(self.window) <= duration('10m'))",
            "window must be from 1s to 10m",
        ),
    )

    success_rate_threshold: Annotated[int, Field(ge=1, le=100)] = 95
    window: Duration = Millis(30_000)
    aggression: Annotated[float, Field(ge=1, le=10)] = 1.0
    max_rejection_probability: Annotated[int, Field(ge=1, le=100)] = 80
    min_requests_per_second: Annotated[int, Field(ge=0, le=1_000_000)] = 0
    fail_on: Annotated[
        list[Annotated[str, BeforeValidator(_status_code_as_text), AfterValidator(_back_pressure_failure)]],
        AfterValidator(_unique),
        Field(min_length=1, max_length=32),
    ] = ["5xx", "429"]

    def __hash__(self) -> int:
        # A cluster's merged policy is a dict key; the list field would make it unhashable.
        return hash((self.success_rate_threshold, self.window, self.aggression, self.max_rejection_probability,
                     self.min_requests_per_second, tuple(self.fail_on)))

    @model_validator(mode="after")
    def _window(self) -> BackPressure:
        if not 1000 <= self.window <= 600_000:
            raise ValueError(f"window ({human_duration_ms(self.window)}) must be from 1s to 10m")
        return self


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


class Fallback(Model):
    """What a route answers while its breaker is OPEN (and to requests a HALF_OPEN breaker
    does not admit as probes): exactly one of a static ``response``, a fallback ``backend``,
    or ``circuitOpen`` (a JSON 503 ``circuit_open`` with ``Retry-After``; the default, and
    the right one where a stale answer is wrong, such as payments)."""

    model_config = cel(
        (
            "(has(self.response) ? 1 : 0) + (has(self.backend) ? 1 : 0) + (has(self.circuitOpen) ? 1 : 0) == 1",
            "set exactly one of response, backend, circuitOpen",
        ),
    )

    response: FallbackResponse | None = None
    backend: Backend | None = None
    circuit_open: Literal[True] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Fallback:
        chosen = [k for k in ("response", "backend", "circuitOpen") if getattr(self, to_snake(k)) is not None]
        if len(chosen) != 1:
            raise ValueError(f"set exactly one of response, backend, circuitOpen (got {chosen or 'none'})")
        return self


class FailurePercentage(Model):
    """Eject a host whose share of 5xx/failed requests over one ``interval`` reaches
    ``threshold`` percent; only counted for hosts with ``requestVolume`` requests in it, and
    only while the cluster has ``minimumHosts`` hosts."""

    threshold: Annotated[int, Field(ge=1, le=100)]
    minimum_hosts: Annotated[int, Field(ge=1, le=10_000)] = 5
    request_volume: Annotated[int, Field(ge=1, le=1_000_000)] = 50


class SuccessRate(Model):
    """Eject a host whose success rate is ``stdevFactor`` standard deviations below the mean
    of the cluster's hosts; needs ``minimumHosts`` hosts with ``requestVolume`` requests
    each in the ``interval``."""

    stdev_factor: Annotated[float, Field(ge=0.1, le=100)] = 1.9
    minimum_hosts: Annotated[int, Field(ge=1, le=10_000)] = 5
    request_volume: Annotated[int, Field(ge=1, le=1_000_000)] = 100


class OutlierDetection(Model):
    """Passive health checking: a host answering ``consecutive5xx`` 5xx in a row is ejected
    for ``baseEjection`` times the number of its ejections; unset fields keep Envoy's defaults."""

    consecutive5xx: Annotated[int, Field(ge=1, le=1_000_000)] | None = Field(default=None, alias="consecutive5xx")
    interval: Duration | None = None
    base_ejection: Duration | None = None
    max_ejection_percent: Annotated[int, Field(ge=0, le=100)] | None = None
    failure_percentage: FailurePercentage | None = None
    success_rate: SuccessRate | None = None


class HealthCheck(Model):
    """Active HTTP health checks: GET ``path`` every ``interval``; 200 is healthy."""

    model_config = cel(("!has(self.timeout) || !has(self.interval) || duration(self.timeout) <= duration(self.interval)",
                        "timeout must not exceed interval"))

    path: Annotated[str, AfterValidator(_prefix), Field(max_length=1024)]
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


def _cidr(value: str) -> str:
    try:
        network = ipaddress.ip_network(value, strict=True)
    except ValueError as error:
        raise ValueError(f"{value!r} is not a CIDR block like 10.0.0.0/8 or 2001:db8::/32 ({error})") from None
    if "/" not in value:
        raise ValueError(f"{value!r} needs a prefix length, like {network.with_prefixlen}")
    return value


Cidr = Annotated[
    str,
    AfterValidator(_cidr),
    WithJsonSchema({"type": "string", "maxLength": 64, "pattern": r"^[0-9a-fA-F:.]+/[0-9]{1,3}$"}),
]


class Access(Model):
    """IP allow and deny lists on the client's direct address (Envoy RBAC); denied → 403.

    A request is refused when its address is in ``deny``, or when ``allow`` is not empty
    and the address is in none of its blocks.
    """

    model_config = cel(
        ("(has(self.allow) && size(self.allow) > 0) || (has(self.deny) && size(self.deny) > 0)",
         "access: set allow or deny (or both)"),
    )

    allow: Annotated[list[Cidr], AfterValidator(_unique), Field(max_length=256)] = []
    deny: Annotated[list[Cidr], AfterValidator(_unique), Field(max_length=256)] = []

    @model_validator(mode="after")
    def _not_empty(self) -> Access:
        if not self.allow and not self.deny:
            raise ValueError("access: set allow or deny (or both)")
        return self


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


CACHE_TTL_MIN_MS = 1_000
CACHE_TTL_MAX_MS = 86_400_000
CACHE_NEEDS_VARY_BY_USER = (
    "cache: this route requires a token (auth.required, the default), and a cached answer could reach "
    "another user; set cache.varyByUser: true (one entry per verified user) or auth.required: false"
)
VARY_BY_USER_NEEDS_AUTH = "cache.varyByUser: this route is public (auth.required: false); there is no verified user to key by"


class Cache(Model):
    """Answers kept in each Envoy's memory and served again without calling the backend
    (Envoy's cache filter). Only GET and HEAD; the upstream's ``Cache-Control`` decides
    (``no-store`` and ``private`` are never kept, its ``max-age`` wins); ``ttl`` is the
    freshness of an answer whose upstream sent no ``Cache-Control`` at all. A public route
    has one entry per URL; a route that requires a token caches only with ``varyByUser``,
    one entry per URL and verified user id (``x-user-id``), so one user's answer never
    reaches another (control_plane/translator/response_cache.py says how)."""

    model_config = cel(
        (
            "duration(self.ttl) >= duration('1s') && duration(self.ttl) <= duration('24h')",
            "ttl must be from 1s to 24h",
        ),
    )

    ttl: Duration
    vary_by_user: bool = False

    @model_validator(mode="after")
    def _ttl(self) -> Cache:
        if not CACHE_TTL_MIN_MS <= self.ttl <= CACHE_TTL_MAX_MS:
            raise ValueError(f"ttl ({human_duration_ms(self.ttl)}) must be from 1s to 24h")
        return self


CACHE_METHODS = ("GET", "HEAD")


class Disabled(Model):
    """Answer directly, without an upstream: a feature flag or a maintenance page."""

    status: Annotated[int, Field(ge=200, le=599)] = 503
    body: Annotated[str, Field(max_length=4096)] = ""


class RouteSpec(Model):
    model_config = cel(
        (
            "!has(self.fallback) || (has(self.circuitBreaker) && has(self.circuitBreaker.errorRate))",
            "fallback: a fallback is served only by a breaker; set circuitBreaker.errorRate",
        ),
        (
            "has(self.disabled) || (has(self.backends) && size(self.backends) > 0)",
            "at least one backend is required (or set disabled)",
        ),
        (
            "!has(self.backends) || size(self.backends) == 0 || self.backends.exists(b, !has(b.weight) || b.weight > 0)",
            "at least one backend needs a weight above 0",
        ),
        (
            "!(has(self.rewrite) && has(self.rewrite.prefix) && has(self.match.pathRegex))",
            "rewrite.prefix: a pathRegex route has no prefix to swap; use rewrite.regex",
        ),
        (
            "!has(self.retries) || (has(self.retries.attempts) && self.retries.attempts == 0)"
            " || !has(self.match.methods) || size(self.match.methods) == 0"
            " || self.match.methods.exists(m, m in ['GET', 'HEAD', 'OPTIONS', 'PUT', 'DELETE'])"
            " || (has(self.retries.idempotencyKeyHeader) && self.match.methods.exists(m, m in ['POST', 'PATCH']))",
            "retries apply to GET, HEAD, OPTIONS, PUT and DELETE only (POST and PATCH with "
            "retries.idempotencyKeyHeader); this route matches none of them",
        ),
        (
            "!has(self.cache) || (has(self.auth) && has(self.auth.required) && !self.auth.required)"
            " || (has(self.cache.varyByUser) && self.cache.varyByUser)",
            CACHE_NEEDS_VARY_BY_USER,
        ),
        (
            "!has(self.cache) || !has(self.cache.varyByUser) || !self.cache.varyByUser"
            " || !has(self.auth) || !has(self.auth.required) || self.auth.required",
            VARY_BY_USER_NEEDS_AUTH,
        ),
        (
            "!has(self.cache) || !has(self.match.methods) || size(self.match.methods) == 0"
            " || self.match.methods.exists(m, m in ['GET', 'HEAD'])",
            "cache: only GET and HEAD answers are cached; this route matches neither",
        ),
        (
            "!has(self.cache) || (!has(self.rewrite) && !has(self.retries) && !has(self.disabled)"
            " && (!has(self.timeouts) || !has(self.timeouts.perTry)) && (!has(self.backends) || size(self.backends) <= 1)"
            " && (!has(self.headers) || !has(self.headers.request)"
            " || ((!has(self.headers.request.set) || size(self.headers.request.set) == 0)"
            " && (!has(self.headers.request.remove) || size(self.headers.request.remove) == 0))))",
            "cache: Envoy's cache fetches a miss itself, past the route's rewrite, retries, perTry timeout, "
            "request headers and backend weights; a cached route has one backend and none of these",
        ),
    )

    hosts: Annotated[list[HostName], AfterValidator(_unique), Field(max_length=64)] = []
    match: Match
    backends: Annotated[list[Backend], Field(max_length=64)] = []
    rewrite: Rewrite | None = None
    headers: HeaderRules = Field(default_factory=lambda: _NO_HEADER_RULES)
    auth: Auth = Field(default_factory=lambda: _DEFAULT_AUTH)
    rate_limits: Annotated[list[RateLimit], Field(max_length=16)] = []
    timeouts: Timeouts = Field(default_factory=lambda: _NO_TIMEOUTS)
    retries: Retries | None = None
    circuit_breaker: CircuitBreaker | None = None
    back_pressure: BackPressure | None = None
    fallback: Fallback | None = None
    """Served only while ``circuitBreaker.errorRate`` holds the route OPEN (or HALF_OPEN)."""
    outlier_detection: OutlierDetection | None = None
    health_check: HealthCheck | None = None
    priority: Literal["critical", "high", "normal", "low"] = "normal"
    access: Access | None = None
    shield: Shield | None = None
    cache: Cache | None = None
    """Per-route response cache; see ``Cache``."""
    waiting_room: WaitingRoom | None = None
    """Requests beyond ``admitPerSecond`` queue with a ticket (``waiting_room``)."""
    validate_: Validation | None = Field(default=None, alias="validate")
    """Request validation in the route's HTTP check; see ``control_plane.model.validation``."""
    disabled: Disabled | None = None

    @model_validator(mode="after")
    def _cross_field(self) -> RouteSpec:
        if self.fallback is not None and (self.circuit_breaker is None or self.circuit_breaker.error_rate is None):
            raise ValueError("fallback: a fallback is served only by a breaker; set circuitBreaker.errorRate")
        if self.disabled is None:
            if not self.backends:
                raise ValueError("backends: at least one backend is required (or set disabled)")
            if all(b.weight == 0 for b in self.backends):
                raise ValueError("backends: at least one backend needs a weight above 0")
        if self.rewrite is not None and self.rewrite.prefix is not None:
            if self.match.path_regex is not None:
                raise ValueError("rewrite.prefix: a pathRegex route has no prefix to swap; use rewrite.regex")
            pattern = parse_path(self.match.path) if self.match.path is not None else None
            if pattern is not None and pattern.glob and len(pattern.variables) >= MAX_VARIABLES:
                raise ValueError(
                    f"rewrite.prefix: rewriting {pattern.text} needs its trailing /** named as a variable, "
                    f"and Envoy allows at most {MAX_VARIABLES}; use fewer variables"
                )
        if self.retries is not None and self.retries.attempts > 0 and self.match.methods:
            retriable = set(IDEMPOTENT_METHODS)
            if self.retries.idempotency_key_header is not None:
                retriable |= set(KEYED_METHODS)
            if not set(self.match.methods) & retriable:
                methods = ", ".join(self.match.methods)
                raise ValueError(
                    f"retries: the route only matches non-idempotent methods ({methods}); "
                    "retries apply to GET, HEAD, OPTIONS, PUT and DELETE only "
                    "(POST and PATCH too with retries.idempotencyKeyHeader)"
                )
        if self.cache is not None:
            self._check_cache(self.cache)
        check_api_keys(self.auth, self.rate_limits)
        timeouts = self.timeouts
        request = timeouts.request if timeouts.request is not None else REQUEST_TIMEOUT_MS
        retried = self.retries is not None and self.retries.attempts > 0
        default_per_try = retried and timeouts.per_try is None and request > PER_TRY_TIMEOUT_MS
        if default_per_try and timeouts.connect is not None and timeouts.connect >= PER_TRY_TIMEOUT_MS:
            raise ValueError(
                f"timeouts: connect ({human_duration_ms(timeouts.connect)}) must be less than perTry "
                f"({human_duration_ms(PER_TRY_TIMEOUT_MS)}, the default with retries); set timeouts.perTry"
            )
        return self


    def _check_cache(self, cache: Cache) -> None:
        if self.auth.required and not cache.vary_by_user:
            raise ValueError(CACHE_NEEDS_VARY_BY_USER)
        if cache.vary_by_user and not self.auth.required:
            raise ValueError(VARY_BY_USER_NEEDS_AUTH)
        if self.match.methods and not set(self.match.methods) & set(CACHE_METHODS):
            raise ValueError(
                f"cache: only GET and HEAD answers are cached; this route matches {', '.join(self.match.methods)}"
            )
        # Envoy's cache filter sends a miss upstream itself (its own async request to the
        # route's cluster), past the route action: these would silently not apply.
        bypassed = [
            name
            for name, used in (
                ("rewrite", self.rewrite is not None),
                ("retries", self.retries is not None),
                ("timeouts.perTry", self.timeouts.per_try is not None),
                ("headers.request", bool(self.headers.request.set or self.headers.request.remove)),
                ("more than one backend", len(self.backends) > 1),
                ("disabled", self.disabled is not None),
            )
            if used
        ]
        if bypassed:
            raise ValueError(
                f"cache: cannot be combined with {', '.join(bypassed)}: Envoy's cache fetches a miss itself, "
                "past the route's rewrite, retries, perTry timeout, request headers and backend weights"
            )


class ObjectMeta(Model):
    name: ObjectName
    namespace: Namespace = "default"


class RouteDocument(Model):
    """A whole Route as written in a file or stored as a custom resource."""

    api_version: Literal["gatehouse.io/v1alpha1"]
    kind: Literal["Route"]
    metadata: ObjectMeta
    spec: RouteSpec

    @model_validator(mode="after")
    def _distinct_backends(self) -> RouteDocument:
        seen: set[tuple[str, str, int]] = set()
        for index, backend in enumerate(self.spec.backends):
            key = (backend.namespace or self.metadata.namespace, backend.service, backend.port)
            if key in seen:
                raise ValueError(
                    f"spec.backends[{index}]: {key[0]}/{backend.service}:{backend.port} is listed twice"
                )
            seen.add(key)
        return self


def to_snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
