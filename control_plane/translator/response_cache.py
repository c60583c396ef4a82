"""Per-route response cache: Envoy's cache filter (simple_http_cache, in each Envoy's memory).

Scoping. The cache filter has no per-route configuration, so it sits in the chain
``disabled`` and a route with ``cache`` turns it on with an empty ``FilterConfig``
(``config: {}``); every other route never reaches it.

What Envoy 1.40's cache does on a miss, verified against real Envoy: it fetches the
answer itself with its own request to the route's cluster, past the route action (the
route's rewrite, retries, timeouts, request and response header rules do not apply).
So the schema refuses ``cache`` with the route options that would be skipped, the
request timeout becomes the route's ``max_stream_duration`` (the downstream stream's
limit, which Envoy enforces while the cache waits), and what the cache needs from the
route travels in request headers, set by ``CacheRequest`` just before the cache filter:

- ``x-gatehouse-cache-control: max-age=<ttl>``: the cluster's upstream header_mutation
  (``cache_ttl_filter``, on the clusters of cached routes) copies it into the answer's
  ``Cache-Control`` only when the upstream sent none, before the cache sees the answer.
  The upstream's own ``no-store``, ``private`` or ``max-age`` always wins. Envoy's
  formatter reads the value from the request, so the upstream sees this header too
  (removing it there would empty the value; checked).

A client's copy of that header is removed on every route with the identity headers.

Who is cached. A public route: one entry per URL. A route that requires a token only
with ``varyByUser``: one entry per URL and verified caller. Envoy's cache keys an entry on
scheme, host (``:authority``) and the raw ``:path`` with its query, byte for byte, and
never serves nor stores a request that carries ``Authorization``; Vary-keyed entries
(``allowed_vary_headers``) crash Envoy 1.40 (a segfault on the first such answer,
checked), so no Vary is allowed and an answer whose upstream sends ``Vary`` is passed
through, never kept. So for ``varyByUser``, after ext_authz has verified the token and
set the caller (``cache_key.KEY_HEADER``):

- ``CacheRequest`` removes ``Authorization`` (already verified; the upstream gets the
  identity headers), so the cache may serve and store the request;
- ``CacheKey`` keys the entry on ``<host>|<caller>``, a host no client can send
  (``cache_key`` says why and how the upstream still gets the client's host). The query
  is never touched: the upstream gets it byte for byte, on a hit's first miss too.

``CacheUserGuard`` (RBAC, next) refuses such a request if it carries no caller (a token
without the claim mapped to it), which would otherwise share one entry with every other
such token: 403 ``user_required``.

Order: after ext_authz and the rate limits (a cached answer is still counted by the
route's limits, and a later authenticated use of the cache could not skip the check),
just before the router, which Envoy recommends as the only filter after it.
"""

from __future__ import annotations

from typing import Any

from control_plane.model.route import Route
from control_plane.model.timeouts import REQUEST_TIMEOUT_MS
from control_plane.translator.feature import HttpFeature
from control_plane.translator.identity_headers import CACHE_HEADERS, ROUTE_HEADER
from control_plane.translator.local_replies import USER_REQUIRED_POLICY
from control_plane.translator.messages import HEADER_MUTATION_TYPE
from control_plane.translator.settings import GatewaySettings
from control_plane.translator.cache_key import KEY_FILTER, KEY_HEADER, key_filter
from servicekit.durations import format_duration_ms

CACHE_FILTER = "envoy.filters.http.cache"
CACHE_TYPE = "type.googleapis.com/envoy.extensions.filters.http.cache.v3.CacheConfig"
SIMPLE_CACHE_TYPE = "type.googleapis.com/envoy.extensions.http.cache.simple_http_cache.v3.SimpleHttpCacheConfig"
FILTER_CONFIG_TYPE = "type.googleapis.com/envoy.config.route.v3.FilterConfig"
HEADER_MUTATION_PER_ROUTE_TYPE = (
    "type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutationPerRoute"
)
CACHE_REQUEST_FILTER = "gatehouse.cache_request"
CACHE_TTL_FILTER = "gatehouse.cache_ttl"
CACHE_USER_FILTER = "gatehouse.cache_user"
RBAC_TYPE = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC"
RBAC_PER_ROUTE_TYPE = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBACPerRoute"
(TTL_HEADER,) = CACHE_HEADERS
MAX_BODY_BYTES = 1 << 20
"""Larger answers are passed through, not kept: the cache is each Envoy's memory."""


def cache_filter() -> dict[str, Any]:
    """Off in the chain; on only for routes with ``cache``.

    ``ignore_request_cache_control_header``: a client cannot force a miss (the cache
    protects the upstream), nor keep an answer out of it.
    """
    return {
        "name": CACHE_FILTER,
        "disabled": True,
        "typed_config": {
            "@type": CACHE_TYPE,
            "typed_config": {"@type": SIMPLE_CACHE_TYPE},
            "max_body_bytes": MAX_BODY_BYTES,
            "ignore_request_cache_control_header": True,
        },
    }


def cache_request_filter() -> dict[str, Any]:
    """A header_mutation off in the chain, on (with the route's mutations) for cached routes."""
    return {"name": CACHE_REQUEST_FILTER, "disabled": True, "typed_config": {"@type": HEADER_MUTATION_TYPE}}


def cache_ttl_filter() -> dict[str, Any]:
    """The cluster's upstream filter giving an answer the route's freshness.

    Inert for requests without the headers (an empty formatted value adds nothing), so
    the routes of a cluster need not agree on ``cache``.
    """
    return {
        "name": CACHE_TTL_FILTER,
        "typed_config": {
            "@type": HEADER_MUTATION_TYPE,
            "mutations": {
                "response_mutations": [
                    {"append": {"header": {"key": "cache-control", "value": f"%REQ({TTL_HEADER})%"},
                                "append_action": "ADD_IF_ABSENT"}},
                ],
            },
        },
    }


def caches(route: Route, settings: GatewaySettings) -> bool:
    """The route's cache is on: it sets ``cache`` and is public or keyed by user (the
    schema allows no other). Without ext_authz no user is verified, so a ``varyByUser``
    route is not cached (the translator already warns its auth is not enforced)."""
    cache = route.spec.cache
    if cache is None or route.spec.disabled is not None:
        return False
    return cache.vary_by_user and settings.ext_authz is not None if route.spec.auth.required else True


def by_user(route: Route, settings: GatewaySettings) -> bool:
    return caches(route, settings) and route.spec.cache is not None and route.spec.cache.vary_by_user


def _set(name: str, value: str) -> dict[str, Any]:
    return {"append": {"header": {"key": name, "value": value}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}}


def cache_request_per_route(route: Route) -> dict[str, Any]:
    cache = route.spec.cache
    assert cache is not None
    ttl_seconds = cache.ttl // 1000
    # The route's request_headers_to_remove does not apply on a miss; the check's route
    # name was for ext_authz only.
    request: list[dict[str, Any]] = [{"remove": ROUTE_HEADER}, _set(TTL_HEADER, f"max-age={ttl_seconds}")]
    mutations: dict[str, Any] = {"request_mutations": request}
    if cache.vary_by_user:
        request.append({"remove": "authorization"})
    return {"@type": HEADER_MUTATION_PER_ROUTE_TYPE, "mutations": mutations}


def cache_user_filter() -> dict[str, Any]:
    return {"name": CACHE_USER_FILTER, "disabled": True, "typed_config": {"@type": RBAC_TYPE}}


def cache_user_per_route() -> dict[str, Any]:
    """Deny a request without the verified caller (see the module docstring)."""
    absent = {"not_id": {"header": {"name": KEY_HEADER, "present_match": True}}}
    return {
        "@type": RBAC_PER_ROUTE_TYPE,
        "rbac": {
            "rules": {
                "action": "DENY",
                "policies": {USER_REQUIRED_POLICY: {"permissions": [{"any": True}], "principals": [absent]}},
            }
        },
    }


class CacheRequest(HttpFeature):
    """What the cache needs from the route, as request headers (see the module docstring)."""

    name = CACHE_REQUEST_FILTER

    def http_filter(self, settings: GatewaySettings) -> dict[str, Any] | None:
        return cache_request_filter()

    def per_route(self, route: Route, settings: GatewaySettings) -> dict[str, Any] | None:
        return cache_request_per_route(route) if caches(route, settings) else None


class CacheKey(HttpFeature):
    """``varyByUser`` routes only: one entry per caller (``cache_key``)."""

    name = KEY_FILTER

    def http_filter(self, settings: GatewaySettings) -> dict[str, Any] | None:
        return key_filter() if settings.ext_authz is not None else None

    def per_route(self, route: Route, settings: GatewaySettings) -> dict[str, Any] | None:
        # An empty config turns on a filter the chain has off.
        return {"@type": FILTER_CONFIG_TYPE, "config": {}} if by_user(route, settings) else None


class CacheUserGuard(HttpFeature):
    """``varyByUser`` routes only: no verified caller, no cache (403 ``user_required``)."""

    name = CACHE_USER_FILTER

    def http_filter(self, settings: GatewaySettings) -> dict[str, Any] | None:
        return cache_user_filter() if settings.ext_authz is not None else None

    def per_route(self, route: Route, settings: GatewaySettings) -> dict[str, Any] | None:
        return cache_user_per_route() if by_user(route, settings) else None


class ResponseCache(HttpFeature):
    name = CACHE_FILTER

    def http_filter(self, settings: GatewaySettings) -> dict[str, Any] | None:
        return cache_filter()

    def per_route(self, route: Route, settings: GatewaySettings) -> dict[str, Any] | None:
        # An empty config turns on a filter the chain has off (Envoy refuses no config).
        return {"@type": FILTER_CONFIG_TYPE, "config": {}} if caches(route, settings) else None

    def route_action(self, route: Route, settings: GatewaySettings) -> dict[str, Any]:
        if not caches(route, settings):
            return {}
        # The route timeout does not bound the cache's own request; the stream's does.
        request = route.spec.timeouts.request
        limit = request if request is not None else REQUEST_TIMEOUT_MS
        return {"max_stream_duration": {"max_stream_duration": format_duration_ms(limit)}}
