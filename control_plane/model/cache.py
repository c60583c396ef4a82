"""A route's ``cache``: answers kept in each Envoy's memory (Envoy's cache filter), and
what a cached route may not combine it with (``check_cache``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pydantic import model_validator

from servicekit.durations import Duration
from servicekit.model import Model
from control_plane.model.auth import Auth
from control_plane.model.backends import Backend
from control_plane.model.declared_rules import DurationWithin, enforce
from control_plane.model.disabled import Disabled
from control_plane.model.headers import HeaderRules
from control_plane.model.match import Match
from control_plane.model.retries import Retries
from control_plane.model.rewrite import Rewrite
from control_plane.model.shared_types import cel, cel_list
from control_plane.model.timeouts import Timeouts

CACHE_TTL_MIN_MS = 1_000
CACHE_TTL_MAX_MS = 86_400_000
CACHE_NEEDS_VARY_BY_USER = (
    "cache: this route requires a token (auth.required, the default), and a cached answer could reach "
    "another user; set cache.varyByUser: true (one entry per verified user) or auth.required: false"
)
VARY_BY_USER_NEEDS_AUTH = "cache.varyByUser: this route is public (auth.required: false); there is no verified user to key by"
_TTL = DurationWithin("ttl", CACHE_TTL_MIN_MS, CACHE_TTL_MAX_MS, required=True)


class Cache(Model):
    """Answers kept in each Envoy's memory and served again without calling the backend
    (Envoy's cache filter). Only GET and HEAD; the upstream's ``Cache-Control`` decides
    (``no-store`` and ``private`` are never kept, its ``max-age`` wins); ``ttl`` is the
    freshness of an answer whose upstream sent no ``Cache-Control`` at all. A public route
    has one entry per URL; a route that requires a token caches only with ``varyByUser``,
    one entry per URL and verified user id (``x-user-id``), so one user's answer never
    reaches another (control_plane/translator/response_cache.py says how)."""

    model_config = cel(_TTL)

    ttl: Duration
    vary_by_user: bool = False

    @model_validator(mode="after")
    def _ttl(self) -> Cache:
        enforce(self, (_TTL,))
        return self


CACHE_METHODS = ("GET", "HEAD")


CACHE_SPEC_RULES = (
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
        f" || self.match.methods.exists(m, m in {cel_list(CACHE_METHODS)})",
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
"""The CEL form, on ``RouteSpec``, of ``check_cache``."""


class _Route(Protocol):
    """What ``check_cache`` reads of a ``RouteSpec``."""

    @property
    def auth(self) -> Auth: ...
    @property
    def match(self) -> Match: ...
    @property
    def rewrite(self) -> Rewrite | None: ...
    @property
    def retries(self) -> Retries | None: ...
    @property
    def timeouts(self) -> Timeouts: ...
    @property
    def headers(self) -> HeaderRules: ...
    @property
    def backends(self) -> Sequence[Backend]: ...
    @property
    def disabled(self) -> Disabled | None: ...


def check_cache(cache: Cache, route: _Route) -> None:
    """What a cached route must be (and must not have); ValueError."""
    if route.auth.required and not cache.vary_by_user:
        raise ValueError(CACHE_NEEDS_VARY_BY_USER)
    if cache.vary_by_user and not route.auth.required:
        raise ValueError(VARY_BY_USER_NEEDS_AUTH)
    if route.match.methods and not set(route.match.methods) & set(CACHE_METHODS):
        raise ValueError(
            f"cache: only GET and HEAD answers are cached; this route matches {', '.join(route.match.methods)}"
        )
    # Envoy's cache filter sends a miss upstream itself (its own async request to the
    # route's cluster), past the route action: these would silently not apply.
    bypassed = [
        name
        for name, used in (
            ("rewrite", route.rewrite is not None),
            ("retries", route.retries is not None),
            ("timeouts.perTry", route.timeouts.per_try is not None),
            ("headers.request", bool(route.headers.request.set or route.headers.request.remove)),
            ("more than one backend", len(route.backends) > 1),
            ("disabled", route.disabled is not None),
        )
        if used
    ]
    if bypassed:
        raise ValueError(
            f"cache: cannot be combined with {', '.join(bypassed)}: Envoy's cache fetches a miss itself, "
            "past the route's rewrite, retries, perTry timeout, request headers and backend weights"
        )

