"""A route's API keys: ``auth.apiKeys``, ``auth.jwt`` and ``auth.consumers`` (docs/api-keys.md).

Pure model: the keys themselves (hashes only) live in Redis, the lookup in ext_authz's
HTTP check (``ext_authz/check/api_keys.py``). ``check_api_keys`` holds the rules that span
``auth`` and ``rateLimits``; ``RouteSpec`` calls it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Protocol

from pydantic import Field, model_validator

from servicekit.model import Model
from control_plane.model.declared_rules import AnyListed, enforce
from control_plane.model.shared_types import cel

CONSUMER_PATTERN = r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$"
"""A consumer's name: what upstreams see in ``x-user-id`` and ``x-consumer``, and a
Kubernetes label value in the chart, so 63 characters of a label's alphabet."""
MAX_CONSUMERS = 256

ConsumerName = Annotated[str, Field(pattern=CONSUMER_PATTERN, max_length=63)]
_LISTED = AnyListed(("allow", "deny"), "list consumers in allow or deny")


class Consumers(Model):
    """Which API-key consumers a route lets in: ``allow`` (only these) and/or ``deny``
    (all but these). Applies to API keys only; tokens are judged by audiences, scopes, roles."""

    model_config = cel(_LISTED)

    allow: Annotated[list[ConsumerName], Field(max_length=MAX_CONSUMERS)] = []
    deny: Annotated[list[ConsumerName], Field(max_length=MAX_CONSUMERS)] = []

    @model_validator(mode="after")
    def _lists(self) -> Consumers:
        enforce(self, (_LISTED,))
        both = sorted(set(self.allow) & set(self.deny))
        if both:
            raise ValueError(f"{', '.join(both)} is both allowed and denied")
        return self


class _Auth(Protocol):
    @property
    def required(self) -> bool: ...
    @property
    def api_keys(self) -> bool: ...
    @property
    def jwt(self) -> bool: ...
    @property
    def consumers(self) -> Consumers | None: ...
    @property
    def audiences(self) -> list[str]: ...
    @property
    def scopes(self) -> list[str]: ...
    @property
    def roles(self) -> list[str]: ...
    @property
    def upstream_token(self) -> object | None: ...


class _Limit(Protocol):
    @property
    def key(self) -> str: ...


def check_api_keys(auth: _Auth, rate_limits: Sequence[_Limit]) -> None:
    """The rules between ``auth``'s fields and the route's limits; ValueError naming the field."""
    if not auth.required and (auth.api_keys or not auth.jwt or auth.consumers is not None):
        raise ValueError("auth: a public route (auth.required: false) reads no credential; drop apiKeys, jwt and consumers")
    if not auth.jwt and not auth.api_keys:
        raise ValueError("auth.jwt: false leaves no way in; set auth.apiKeys: true (or auth.required: false for a public route)")
    if auth.consumers is not None and not auth.api_keys:
        raise ValueError("auth.consumers: lists API-key consumers; set auth.apiKeys: true")
    if not auth.jwt:
        for name in ("audiences", "scopes", "roles"):
            if getattr(auth, name):
                raise ValueError(f"auth.{name}: applies to tokens, and auth.jwt is false (API keys carry none)")
    if auth.api_keys and auth.upstream_token is not None:
        raise ValueError(
            "auth.upstreamToken: swaps a verified token for the upstream's own, and an API-key request has none; "
            "serve API keys and token swap on separate routes"
        )
    if auth.api_keys:
        for index, limit in enumerate(rate_limits):
            if limit.key == "apiKey":
                raise ValueError(
                    f"rateLimits[{index}].key: apiKey on a route that takes API keys would name counters by the "
                    "secret key; use key: user (counts per consumer)"
                )
