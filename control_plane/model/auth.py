"""A route's ``auth``: whether it needs a verified caller (required by default), which
tokens it takes (audiences, scopes, roles), API keys, and token swap.

API keys are ``control_plane.model.api_keys``, token swap
``control_plane.model.upstream_token``.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from servicekit.model import Model
from control_plane.model.api_keys import Consumers
from control_plane.model.shared_types import cel
from control_plane.model.upstream_token import UPSTREAM_TOKEN_PUBLIC, UpstreamToken

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


DEFAULT_AUTH = Auth()
"""``RouteSpec.auth``'s default: a verified token is required."""
