"""What every route feature's model shares: names, hosts, header names and values, the
``cel()`` helper that puts a model's CEL rules into the CRD (as Envoy Gateway's
``api/v1alpha1/shared_types.go``).

Each feature of a route has its own module in ``control_plane/model/``; ``schema.py``
composes them into ``RouteSpec``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Protocol

from pydantic import AfterValidator, ConfigDict, WithJsonSchema

from control_plane.model.paths import check_re2

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_HOST = re.compile(rf"^(\*\.)?{_DNS_LABEL}(\.{_DNS_LABEL})*$")
HEADER_NAME_PATTERN = r"^[a-z0-9!#$%&'*+.^_`|~-]+$"
"""A lowercase HTTP header name (RFC 9110 token characters)."""
_HEADER_NAME = re.compile(HEADER_NAME_PATTERN)
_SERVICE = re.compile(rf"^{_DNS_LABEL}$")
_OBJECT_NAME = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")
STATUS_CODE = re.compile(r"^[1-5][0-9][0-9]$")


class CelRule(Protocol):
    """A rule declared once for both sides (``control_plane.model.declared_rules``)."""

    def cel(self) -> tuple[str, str]: ...


def cel(*rules: tuple[str, str] | CelRule) -> ConfigDict:
    """The CRD's CEL form of a model's cross-field rules, kept next to the Python check:
    (rule, message) pairs written by hand, or declared rules that give their own.

    The API server refuses what these catch before it is stored; the Python validators
    stay authoritative (Git files never meet the API server).
    """
    pairs = [r if isinstance(r, tuple) else r.cel() for r in rules]
    return ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [{"rule": rule, "message": message} for rule, message in pairs]}
    )


def cel_list(names: tuple[str, ...]) -> str:
    """A CEL list literal of strings."""
    return "[" + ", ".join(f"'{name}'" for name in names) + "]"


def _host(value: str) -> str:
    if value != "*" and not _HOST.match(value):
        raise ValueError(f"{value!r} is not a lowercase DNS name (a leading '*.' wildcard is allowed)")
    return value


def header_name(value: str) -> str:
    """A lowercase HTTP header name, or ValueError."""
    if not _HEADER_NAME.match(value):
        raise ValueError(f"{value!r} is not a lowercase HTTP header name")
    return value


def header_name_unless(refusal: Callable[[str], str | None]) -> Callable[[str], str]:
    """A header-name validator that also refuses what ``refusal`` gives a reason for."""

    def validate(value: str) -> str:
        header_name(value)
        reason = refusal(value)
        if reason is not None:
            raise ValueError(reason)
        return value

    return validate


def _settable_header(value: str) -> str:
    header_name(value)
    if value == "host":
        raise ValueError("'host' cannot be set with headers; it is the routing key")
    return value


def _header_value(value: str) -> str:
    if any(ch in value for ch in "\r\n\x00"):
        raise ValueError("header values must not contain CR, LF or NUL")
    return value


def _regex(value: str) -> str:
    check_re2(value)
    return value


def _prefix(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"{value!r} must start with '/'")
    return value


def unique(values: list[str]) -> list[str]:
    """A list validator: no value twice."""
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise ValueError(f"{value!r} is listed twice")
        seen.add(value)
    return values


def status_code_as_text(value: object) -> object:
    """`retryOn: [503]` unquoted is an int in YAML; it means the status code."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


HostName = Annotated[
    str,
    AfterValidator(_host),
    WithJsonSchema({"type": "string", "maxLength": 253, "pattern": rf"^(\*|(\*\.)?{_DNS_LABEL}(\.{_DNS_LABEL})*)$"}),
]
HEADER_SCHEMA = WithJsonSchema({"type": "string", "maxLength": 256, "pattern": _HEADER_NAME.pattern})
"""The CRD's schema of a header name (the Python validators say more)."""
HeaderName = Annotated[str, AfterValidator(header_name), HEADER_SCHEMA]
SettableHeaderName = Annotated[str, AfterValidator(_settable_header), HEADER_SCHEMA]
HeaderValue = Annotated[str, AfterValidator(_header_value)]
Regex = Annotated[str, AfterValidator(_regex)]
PathPrefix = Annotated[str, AfterValidator(_prefix)]


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
