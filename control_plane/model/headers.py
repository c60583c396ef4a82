"""A route's ``headers``: request headers set and removed before the request goes
upstream, response headers before the answer goes back.

A route never sets or removes a header the gateway vouches for
(``servicekit.check_contract.reserved_for_routes``).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from servicekit.check_contract import ENVOY_PREFIX, INTERNAL_PREFIX, VOUCHED_HEADERS, reserved_for_routes
from servicekit.model import Model
from control_plane.model.shared_types import (
    HEADER_SCHEMA,
    HeaderValue,
    SettableHeaderName,
    cel,
    cel_list,
    header_name_unless,
    unique,
)

_RESERVED_CEL = (
    f"!({{k}} in {cel_list(VOUCHED_HEADERS)}) && !{{k}}.startsWith('{INTERNAL_PREFIX}') && !{{k}}.startsWith('{ENVOY_PREFIX}')"
)
"""The CEL form of ``check_contract.reserved_for_routes``, for a name ``{k}``."""
_RESERVED_MESSAGE = (
    f"headers.request: {', '.join(VOUCHED_HEADERS)}, {INTERNAL_PREFIX}* and {ENVOY_PREFIX}* are the gateway's; "
    "a route may not set or remove them"
)


RequestHeaderName = Annotated[str, AfterValidator(header_name_unless(reserved_for_routes)), HEADER_SCHEMA]
"""A request header a route may set or remove: not one the gateway vouches for."""


class HeaderOps(Model):
    """Response headers to set and remove."""

    set: dict[SettableHeaderName, HeaderValue] = Field(default_factory=dict, max_length=64)
    remove: Annotated[list[SettableHeaderName], AfterValidator(unique), Field(max_length=64)] = []


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
    remove: Annotated[list[RequestHeaderName], AfterValidator(unique), Field(max_length=64)] = []


# Defaults are shared frozen instances: pydantic would deep-copy a model default for
# every route, which was a fifth of the cost of loading 10,000 routes.
_NO_HEADER_OPS = HeaderOps()
_NO_REQUEST_HEADER_OPS = RequestHeaderOps()


class HeaderRules(Model):
    request: RequestHeaderOps = Field(default_factory=lambda: _NO_REQUEST_HEADER_OPS)
    response: HeaderOps = Field(default_factory=lambda: _NO_HEADER_OPS)


NO_HEADER_RULES = HeaderRules()
"""``RouteSpec.headers``'s default (shared: models are frozen)."""
