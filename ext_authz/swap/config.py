"""ext_authz's settings for token swap (a route's ``auth.upstreamToken``; docs/upstream-token.md).

    http:
      upstreamTokens:
        issuer: https://gateway.internal/      # the internal token's iss
        keyFile: upstream-signing.pem          # PEM private key: EC P-256 (ES256) or RSA ≥ 2048 (RS256)
        keyId: gw-2026-12                      # the JWT header's kid; default: the key's RFC 7638 thumbprint
        ttl: 60s                               # the internal token's lifetime (never past the client token's exp)
        cacheSize: 10000                       # (client token, route audience) pairs kept
        audiences:                             # what each namespace's routes may ask tokens for
          legacy: [legacy-billing]             # routes in namespace legacy
          "*": [reporting]                     # routes in any namespace
        exchange:                              # routes with upstreamToken.exchange: the RFC 8693 call
          timeout: 200ms
          endpoints: [https://sts.internal/token]   # the only URLs routes may name
          allowPlainHttp: false                # http:// endpoints (the client's token in clear): only if true

Without ``keyFile`` only exchange routes can be served; a route that needs a signed token
is then refused, as is a route asking for an audience its namespace is not given, or an
exchange endpoint not listed, and any swap route without this block: that route alone
(answered 503, and reported on its status), every other route keeps its rules. A route
author must not be able to mint tokens for another service's audience, nor send clients'
tokens to a URL of their choosing.

The namespace ``audiences`` is keyed on is the route's, which its source vouches for: a
Kubernetes Route's is where the API server stored it, and a Git route exists only in the
namespaces its Git source is bound to (the control plane's ``sources.git[].namespaces``;
a document claiming another is refused there and never reaches this service).
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field, model_validator

from servicekit.durations import Duration, Millis
from servicekit.model import Model

MIN_TTL_MS = 5_000
MAX_TTL_MS = 3_600_000


class Exchange(Model):
    timeout: Duration = Millis(200)
    """The whole token-exchange call (connect, send, answer); past it the request gets 503.
    Keep it below the gateway's ``extAuthz.timeout`` (250 ms by default): past that, Envoy
    answers the check's generic 503 itself, whatever this call brings later."""
    endpoints: Annotated[list[Annotated[str, Field(min_length=8, max_length=2048)]], Field(max_length=64)] = []
    """The token-exchange URLs routes may name (exactly); none: no route may exchange."""
    allow_plain_http: bool = False
    """Allow ``http://`` endpoints: clients' tokens would cross the network in clear."""

    @model_validator(mode="after")
    def _endpoints(self) -> Exchange:
        for index, url in enumerate(self.endpoints):
            parts = urlsplit(url)
            if parts.scheme not in ("https", "http") or not parts.hostname or parts.username or parts.password or parts.fragment:
                raise ValueError(f"endpoints[{index}]: {url[:200]!r} is not an http(s) URL with a host, without credentials or #fragment")
            if parts.scheme == "http" and not self.allow_plain_http:
                raise ValueError(
                    f"endpoints[{index}]: {url[:200]!r} is plain http: clients' tokens would cross the network in clear; "
                    "use https, or set allowPlainHttp: true"
                )
        return self


class UpstreamTokens(Model):
    issuer: Annotated[str, Field(min_length=1, max_length=512)]
    key_file: str | None = None
    key_id: Annotated[str, Field(pattern=r"^[A-Za-z0-9._:+=-]{1,128}$")] | None = None
    ttl: Duration = Millis(60_000)
    cache_size: Annotated[int, Field(ge=1, le=1_000_000)] = 10_000
    audiences: dict[
        Annotated[str, Field(pattern=r"^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$", max_length=63)],
        Annotated[list[Annotated[str, Field(pattern=r"^\S+$", min_length=1, max_length=256)]], Field(max_length=256)],
    ] = {}
    """Namespace (``*``: any) → the audiences its routes may ask tokens for; none: no route may."""
    exchange: Exchange = Exchange()

    @model_validator(mode="after")
    def _ttl(self) -> UpstreamTokens:
        if not MIN_TTL_MS <= self.ttl <= MAX_TTL_MS:
            raise ValueError("ttl: must be from 5s to 1h (the internal token is meant to be short-lived)")
        if self.exchange.timeout <= 0:
            raise ValueError("exchange.timeout: must be above 0")
        return self
