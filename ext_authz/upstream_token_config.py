"""ext_authz's settings for token swap (a route's ``auth.upstreamToken``; docs/upstream-token.md).

    http:
      upstreamTokens:
        issuer: https://gateway.internal/      # the internal token's iss
        keyFile: upstream-signing.pem          # PEM private key: EC P-256 (ES256) or RSA ≥ 2048 (RS256)
        keyId: gw-2026-12                      # the JWT header's kid; default: the key's RFC 7638 thumbprint
        ttl: 60s                               # the internal token's lifetime (never past the client token's exp)
        cacheSize: 10000                       # (client token, route audience) pairs kept
        exchange: {timeout: 200ms}             # routes with upstreamToken.exchange: the RFC 8693 call

Without ``keyFile`` only exchange routes can be served; a route that needs a signed token
is then refused (the route table is NACKed), as is any swap route without this block.
"""

from __future__ import annotations

from typing import Annotated

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


class UpstreamTokens(Model):
    issuer: Annotated[str, Field(min_length=1, max_length=512)]
    key_file: str | None = None
    key_id: Annotated[str, Field(pattern=r"^[A-Za-z0-9._:+=-]{1,128}$")] | None = None
    ttl: Duration = Millis(60_000)
    cache_size: Annotated[int, Field(ge=1, le=1_000_000)] = 10_000
    exchange: Exchange = Exchange()

    @model_validator(mode="after")
    def _ttl(self) -> UpstreamTokens:
        if not MIN_TTL_MS <= self.ttl <= MAX_TTL_MS:
            raise ValueError("ttl: must be from 5s to 1h (the internal token is meant to be short-lived)")
        if self.exchange.timeout <= 0:
            raise ValueError("exchange.timeout: must be above 0")
        return self
