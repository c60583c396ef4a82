"""A route's ``auth``: whether it needs a verified caller (required by default), which
tokens it takes (audiences, scopes, roles, how old), API keys, and token swap.

API keys are ``control_plane.model.api_keys``, token swap
``control_plane.model.upstream_token``.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from servicekit.durations import Duration
from servicekit.model import Model
from control_plane.model.api_keys import Consumers
from control_plane.model.declared_rules import DurationWithin, enforce
from control_plane.model.shared_types import cel
from control_plane.model.upstream_token import UPSTREAM_TOKEN_PUBLIC, UpstreamToken

AuthName = Annotated[str, Field(pattern=r"^\S+$", max_length=256)]
"""One audience, scope or role: no spaces (they travel to ext_authz space-separated)."""


MAX_TOKEN_AGE_PUBLIC = "maxTokenAge: a public route (required: false) checks no token"  # noqa: S105 - a message
MAX_TOKEN_AGE_KEYS = "maxTokenAge: bounds a token's age, and an API key has none; serve API keys on another route"  # noqa: S105 - a message
_TOKEN_AGE = (DurationWithin("maxTokenAge", 1000, 86_400_000),)


class Auth(Model):
    model_config = cel(
        ("!has(self.upstreamToken) || !has(self.required) || self.required", UPSTREAM_TOKEN_PUBLIC),
        ("!has(self.maxTokenAge) || !has(self.required) || self.required", MAX_TOKEN_AGE_PUBLIC),
        ("!has(self.maxTokenAge) || !has(self.apiKeys) || !self.apiKeys", MAX_TOKEN_AGE_KEYS),
        *(rule.cel() for rule in _TOKEN_AGE),
    )

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
    max_token_age: Duration | None = None
    """A token issued (``iat``) longer ago than this is refused (401 ``token_too_old``): a
    recent sign-in for sensitive routes (payments, account changes), whatever the token's
    ``exp``. Decided in the HTTP check (``translator/token_age.py``)."""

    @model_validator(mode="after")
    def _upstream_token(self) -> Auth:
        if self.upstream_token is not None and not self.required:
            raise ValueError(UPSTREAM_TOKEN_PUBLIC)
        if self.max_token_age is not None:
            if not self.required:
                raise ValueError(MAX_TOKEN_AGE_PUBLIC)
            if self.api_keys:
                raise ValueError(MAX_TOKEN_AGE_KEYS)
            enforce(self, _TOKEN_AGE)
        return self


DEFAULT_AUTH = Auth()
"""``RouteSpec.auth``'s default: a verified token is required."""
