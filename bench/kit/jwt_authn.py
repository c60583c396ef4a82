"""Envoy's own ``envoy.filters.http.jwt_authn`` (and ``local_ratelimit``) as a benchmark scenario.

Not a product mode. Gatehouse verifies tokens in ``gatehouse ext-authz`` (docs/ext-authz.md),
one gRPC call per request. This module builds the config for the other end of the spectrum:
Envoy verifying the JWT itself, in C++, with no call out, so a benchmark can put "ext_authz"
next to "the ceiling of in-Envoy enforcement" on the same routes.

The JWKS is given inline (``local_jwks.inline_string``), as if the control plane delivered it
with the listener: no JWKS cluster, no fetch on the request path, so the number measures
verification alone.

jwt_authn makes fewer checks than our ext_authz, so a faster number here is not "the same
policy, cheaper". Measured against Envoy 1.40: it accepts tokens with ``crit``, ``jku``/``x5u``/
``jwk``/``x5c``, no ``jti``, ``iat`` in the future, any kid length, RSA keys under 2048 bits,
``use: enc`` keys, and any RSA alg (PS256, RS512) when the JWK has no ``alg``; it has no
revocation, no scopes or roles, and answers in plain text. It does refuse ``none``, duplicate
JSON members, HS256-with-the-public-key, two Authorization headers, and it strips a client's
``x-user-id`` (on every route, even ones with jwt_authn disabled). A ``sub`` with control
characters is copied into the header as is: a proxied route then fails with 503
(``invalid_header_value_for: x-user-id``); a ``direct_response`` route that echoes
``%REQ(x-user-id)%`` writes the raw CR/LF into the response, so do not echo it in a benchmark.

Everything returned is Envoy's JSON form (what a static bootstrap or the control plane's
resources hold): plain dicts, ``@type`` on every ``typed_config``.

Usage, in an HTTP connection manager::

    http_filters = [
        jwt_authn_filter(issuer, ["api"], json.dumps(jwks)),
        local_ratelimit_filter(),              # optional, after jwt_authn (keys on x-user-id)
        router_filter(),                       # bench.kit.envoy_config
    ]
    route["typed_per_filter_config"] = {
        **jwt_authn_per_route(),               # or jwt_authn_per_route(disabled=True) for a public route
        **local_ratelimit_per_route(100, 1.0, key_header="x-user-id"),
    }
"""

from __future__ import annotations

from typing import Any

JWT_AUTHN = "envoy.filters.http.jwt_authn"
JWT_AUTHN_TYPE = "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication"
JWT_AUTHN_PER_ROUTE_TYPE = "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.PerRouteConfig"
LOCAL_RATELIMIT = "envoy.filters.http.local_ratelimit"
LOCAL_RATELIMIT_TYPE = "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit"

PROVIDER = "gatehouse"
REQUIREMENT = "bearer"
"""The requirement every protected route names (``PerRouteConfig.requirement_name``)."""

_FULL = {"default_value": {"numerator": 100, "denominator": "HUNDRED"}}


def _duration(seconds: float) -> str:
    return f"{seconds:.3f}s"


def jwt_authn_filter(
    issuer: str,
    audiences: list[str],
    jwks_json: str,
    *,
    forward_sub_header: str = "x-user-id",
    cache_entries: int = 1000,
    clock_skew_seconds: int = 30,
    route_audiences: dict[str, list[str]] | None = None,
    require_by_default: bool = True,
) -> dict[str, Any]:
    """The jwt_authn HTTP filter: one provider, JWKS inline, ``sub`` copied into a header.

    - ``from_headers`` is explicit: left out, Envoy also reads ``?access_token=`` from the query
      string, which our ext_authz never accepts.
    - ``forward: false``: the token is removed before the upstream (ext_authz does not strip it,
      but a benchmark upstream has no use for it, and it keeps request sizes comparable).
    - ``require_expiration`` and ``clock_skew_seconds`` (default 30, our ``leeway: 30s``; Envoy's
      own default is 60) mirror docs/ext-authz.md. Envoy applies the skew to ``exp`` and ``nbf``
      only; ``iat`` is never looked at.
    - ``jwt_cache_config.jwt_cache_size``: verified tokens cached per worker thread (Envoy's
      cache only takes tokens up to ``jwt_max_token_size``, 4 KiB by default; that is a cache
      limit, not a size limit on requests).
    - ``requirement_map`` holds ``REQUIREMENT`` (the issuer's audiences) plus one requirement per
      ``route_audiences`` entry (name → audiences, ``provider_and_audiences``), which a route
      selects with ``jwt_authn_per_route(name)``. A token whose ``aud`` misses gets 403.
    - ``require_by_default``: a catch-all rule (prefix ``/``) requires ``REQUIREMENT`` on every
      route that carries no per-route config. Without it, a route that forgets its per-route
      config is not checked at all (requirement_map alone is fail-open by omission).
    """
    provider: dict[str, Any] = {
        "issuer": issuer,
        "audiences": list(audiences),
        "local_jwks": {"inline_string": jwks_json},
        "from_headers": [{"name": "authorization", "value_prefix": "Bearer "}],
        "forward": False,
        "require_expiration": True,
        "clock_skew_seconds": clock_skew_seconds,
        "claim_to_headers": [{"header_name": forward_sub_header, "claim_name": "sub"}],
        "jwt_cache_config": {"jwt_cache_size": cache_entries},
    }
    requirement_map: dict[str, Any] = {REQUIREMENT: {"provider_name": PROVIDER}}
    for name, route_aud in (route_audiences or {}).items():
        requirement_map[name] = {
            "provider_and_audiences": {"provider_name": PROVIDER, "audiences": list(route_aud)}
        }
    config: dict[str, Any] = {
        "@type": JWT_AUTHN_TYPE,
        "providers": {PROVIDER: provider},
        "requirement_map": requirement_map,
    }
    if require_by_default:
        config["rules"] = [{"match": {"prefix": "/"}, "requirement_name": REQUIREMENT}]
    return {"name": JWT_AUTHN, "typed_config": config}


def jwt_authn_per_route(requirement_name: str = REQUIREMENT, *, disabled: bool = False) -> dict[str, Any]:
    """A route's ``typed_per_filter_config`` entry: which requirement it needs, or none.

    The per-route config wins over ``rules``; ``disabled=True`` is how a public route
    (``auth: {required: false}``) opts out when ``require_by_default`` is on.
    """
    per_route: dict[str, Any] = {"@type": JWT_AUTHN_PER_ROUTE_TYPE}
    if disabled:
        per_route["disabled"] = True
    else:
        per_route["requirement_name"] = requirement_name
    return {JWT_AUTHN: per_route}


def local_ratelimit_filter(stat_prefix: str = "bench_local_rl") -> dict[str, Any]:
    """The local_ratelimit HTTP filter, inert at the listener: limits come per route.

    Place it after jwt_authn, so the ``x-user-id`` header jwt_authn set from the verified
    ``sub`` exists when a route's descriptors are built. No ``token_bucket`` here: the filter
    only limits on routes that carry ``local_ratelimit_per_route(...)``.
    """
    return {"name": LOCAL_RATELIMIT, "typed_config": {"@type": LOCAL_RATELIMIT_TYPE, "stat_prefix": stat_prefix}}


def _bucket(requests: int, per_seconds: float, burst: int | None) -> dict[str, Any]:
    if requests < 1 or per_seconds < 0.05:
        raise ValueError("need requests >= 1 and per_seconds >= 0.05 (Envoy's minimum fill_interval is 50 ms)")
    return {"max_tokens": burst or requests, "tokens_per_fill": requests, "fill_interval": _duration(per_seconds)}


def local_ratelimit_per_route(
    requests: int,
    per_seconds: float,
    *,
    burst: int | None = None,
    key_header: str | None = None,
    max_keys: int = 10000,
    stat_prefix: str = "bench_local_rl",
) -> dict[str, Any]:
    """A route's local token bucket: ``requests`` tokens every ``per_seconds``, 429 when empty.

    What Envoy 1.40's local_ratelimit can key on (and what it cannot):

    - ``key_header=None``: one bucket for the route, shared by every caller. That is the only
      thing the filter does by itself: it has no notion of "the user".
    - ``key_header="x-user-id"``: one bucket per distinct header value. The route's
      ``rate_limits`` action ``request_headers`` turns the header into a descriptor entry
      ``user=<value>``, and a descriptor whose entry value is empty (``value: ""``) is a
      *dynamic* descriptor: Envoy creates a bucket per value it sees, in an LRU of
      ``max_dynamic_descriptors`` (default 20). An evicted user's bucket starts full again,
      so more distinct users than ``max_keys`` within a window weaken the limit. The header
      is only as trustworthy as whoever set it: behind jwt_authn it is the verified ``sub``
      (jwt_authn removes a client-sent value, then sets its own), without it it is whatever
      the client sent.
      A request without the header builds no descriptor and only meets the route bucket.
    - ``rate_limits`` sits inside the per-route LocalRateLimit (not on the RouteAction), so it
      works on ``direct_response`` routes too, which have no RouteAction.
    - Buckets are per Envoy process (shared by its workers), never across replicas: N
      gateways allow N× the rate (``local_cluster_rate_limit`` divides by membership, not
      used here). There is no Redis, no per-user override, no quota beyond one window.

    With a key, the route's own bucket is set far above the per-user one and
    ``always_consume_default_token_bucket: false``, so only the user's bucket limits.
    """
    bucket = _bucket(requests, per_seconds, burst)
    config: dict[str, Any] = {
        "@type": LOCAL_RATELIMIT_TYPE,
        "stat_prefix": stat_prefix,
        "filter_enabled": {**_FULL, "runtime_key": f"{stat_prefix}_enabled"},   # 0% when absent
        "filter_enforced": {**_FULL, "runtime_key": f"{stat_prefix}_enforced"},  # 0% when absent
        "enable_x_ratelimit_headers": "DRAFT_VERSION_03",
    }
    if key_header is None:
        config["token_bucket"] = bucket
    else:
        config["token_bucket"] = {
            "max_tokens": 1_000_000_000,
            "tokens_per_fill": 1_000_000_000,
            "fill_interval": "1s",
        }
        config["always_consume_default_token_bucket"] = False
        config["max_dynamic_descriptors"] = max_keys
        config["rate_limits"] = [
            {"actions": [{"request_headers": {"header_name": key_header, "descriptor_key": "user"}}]}
        ]
        config["descriptors"] = [{"entries": [{"key": "user", "value": ""}], "token_bucket": bucket}]
    return {LOCAL_RATELIMIT: config}
