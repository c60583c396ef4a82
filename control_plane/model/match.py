"""A route's ``match``: which requests it takes (path, methods, request headers).

The path language is ``control_plane.model.paths``; which route wins an overlap is
``control_plane.model.ordering``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from servicekit.check_contract import IDENTITY_HEADERS, INTERNAL_PREFIX, unmatchable
from servicekit.model import Model
from control_plane.model.declared_rules import ExactlyOne, enforce
from control_plane.model.paths import parse_path
from control_plane.model.shared_types import (
    HEADER_SCHEMA,
    HeaderValue,
    PathPrefix,
    Regex,
    cel,
    cel_list,
    header_name_unless,
    unique,
)

METHODS = ("GET", "HEAD", "OPTIONS", "PUT", "DELETE", "POST", "PATCH", "TRACE", "CONNECT")
Method = Literal["GET", "HEAD", "OPTIONS", "PUT", "DELETE", "POST", "PATCH", "TRACE", "CONNECT"]

_UNMATCHABLE_MESSAGE = (
    f"match.headers: {', '.join(IDENTITY_HEADERS)} and {INTERNAL_PREFIX}* cannot select a route: "
    "a route is chosen before the client's copy is removed"
)


def _path(value: str) -> str:
    parse_path(value)
    return value


MatchableHeaderName = Annotated[str, AfterValidator(header_name_unless(unmatchable)), HEADER_SCHEMA]
_ONE_MATCHER = ExactlyOne("exact", "prefix", "regex", "present")
_ONE_PATH = ExactlyOne("path", "pathPrefix", "pathRegex")


class HeaderMatch(Model):
    """One request-header condition; exactly one of exact/prefix/regex/present."""

    model_config = cel(
        _ONE_MATCHER,
        (f"!(self.name in {cel_list(IDENTITY_HEADERS)}) && !self.name.startsWith('{INTERNAL_PREFIX}')", _UNMATCHABLE_MESSAGE),
    )

    name: MatchableHeaderName
    exact: HeaderValue | None = None
    prefix: HeaderValue | None = None
    regex: Regex | None = None
    present: bool | None = None
    invert: bool = False

    @model_validator(mode="after")
    def _one_matcher(self) -> HeaderMatch:
        enforce(self, (_ONE_MATCHER,))
        return self


OTHER_METHODS_NEED_METHODS = "otherMethods: reject answers 405 to the methods not in methods; set methods"


class Match(Model):
    """Which requests the route takes; exactly one of path/pathPrefix/pathRegex.

    ``otherMethods``: what a request on the route's path with a method it does not take
    gets: ``fallThrough`` (the default) lets a broader route take it, ``reject`` answers 405
    with ``Allow`` (the gateway's JSON error ``method_not_allowed``)."""

    model_config = cel(
        _ONE_PATH,
        (
            "!has(self.otherMethods) || self.otherMethods == 'fallThrough' || (has(self.methods) && size(self.methods) > 0)",
            OTHER_METHODS_NEED_METHODS,
        ),
    )

    path: Annotated[str, AfterValidator(_path)] | None = None
    path_prefix: PathPrefix | None = None
    path_regex: Regex | None = None
    methods: Annotated[list[Method], AfterValidator(unique), Field(max_length=9)] = []
    other_methods: Literal["fallThrough", "reject"] = "fallThrough"
    headers: Annotated[list[HeaderMatch], Field(max_length=16)] = []

    @model_validator(mode="after")
    def _one_path(self) -> Match:
        enforce(self, (_ONE_PATH,))
        if self.other_methods == "reject" and not self.methods:
            raise ValueError(OTHER_METHODS_NEED_METHODS)
        return self
