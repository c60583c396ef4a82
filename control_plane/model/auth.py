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
IssuerName = Annotated[str, Field(pattern=r"^\S+$", min_length=1, max_length=512)]
"""A token issuer's ``iss``, exactly as ext_authz's ``issuers[].issuer`` names it."""


MAX_TOKEN_AGE_PUBLIC = "maxTokenAge: a public route (required: false) checks no token"  # noqa: S105 - a message
MAX_TOKEN_AGE_KEYS = "maxTokenAge: bounds a token's age, and an API key has none; serve API keys on another route"  # noqa: S105 - a message
ISSUERS_PUBLIC = "issuers: a public route (required: false) checks no token"
ISSUERS_KEYS_ONLY = "issuers: a route that takes only API keys (jwt: false) reads no token"
_TOKEN_AGE = (DurationWithin("maxTokenAge", 1000, 86_400_000),)


class Auth(Model):
    model_config = cel(
        ("!has(self.upstreamToken) || !has(self.required) || self.required", UPSTREAM_TOKEN_PUBLIC),
        ("!has(self.maxTokenAge) || !has(self.required) || self.required", MAX_TOKEN_AGE_PUBLIC),
        ("!has(self.maxTokenAge) || !has(self.apiKeys) || !self.apiKeys", MAX_TOKEN_AGE_KEYS),
        ("!has(self.issuers) || !has(self.required) || self.required", ISSUERS_PUBLIC),
        ("!has(self.issuers) || !has(self.jwt) || self.jwt", ISSUERS_KEYS_ONLY),
        *(rule.cel() for rule in _TOKEN_AGE),
    )

    required: bool = True
    issuers: Annotated[list[IssuerName], Field(min_length=1, max_length=32)] | None = None
    """The only issuers whose tokens the route accepts (401 ``issuer_not_accepted`` for
    another's); unset: every issuer the gateway trusts, which ``gatehouse validate`` warns
    of (a tenant's route would take tokens minted for any other tenant's issuer)."""
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
        if self.issuers is not None:
            if not self.required:
                raise ValueError(ISSUERS_PUBLIC)
            if not self.jwt:
                raise ValueError(ISSUERS_KEYS_ONLY)
        return self


def default_issuers_warning(auth: Auth) -> str | None:
    """What ``gatehouse validate`` says of a route that reads tokens and names no issuers:
    it takes every trusted issuer's tokens, a tenant's route another tenant's."""
    if not auth.required or not auth.jwt or auth.issuers is not None:
        return None
    return (
        "auth.issuers: not set, so the route accepts tokens of every issuer the gateway trusts; "
        "name the issuers this route's callers come from"
    )


DEFAULT_AUTH = Auth()
"""``RouteSpec.auth``'s default: a verified token is required."""
