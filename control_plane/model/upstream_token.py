"""A route's ``auth.upstreamToken``: the upstream gets its own token, never the client's.

    auth:
      upstreamToken:
        audience: legacy-billing                            # the token's aud
        exchange: {url: https://sts.internal/token}          # optional: RFC 8693 instead of signing

Served by the HTTP authorization check only (``extAuthz.protocol: http``); the
translator refuses the route otherwise. See docs/upstream-token.md.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field, model_validator

from servicekit.model import Model
from control_plane.model.shared_types import cel

MAX_URL_CHARS = 2048
UPSTREAM_TOKEN_PUBLIC = "upstreamToken: a public route (required: false) has no verified subject to put in a token"  # noqa: S105 - a message


class TokenExchange(Model):
    # The scheme in any case, as urlsplit reads it.
    model_config = cel(
        ("self.url.lowerAscii().startsWith('https://') || self.url.lowerAscii().startsWith('http://')", "url must be an http(s) URL"),
    )

    url: Annotated[str, Field(min_length=8, max_length=MAX_URL_CHARS)]

    @model_validator(mode="after")
    def _url(self) -> TokenExchange:
        parts = urlsplit(self.url)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ValueError(f"url: {self.url[:200]!r} is not an http(s) URL with a host")
        if parts.username is not None or parts.password is not None or parts.fragment:
            raise ValueError("url: must not carry credentials or a #fragment")
        return self


class UpstreamToken(Model):
    audience: Annotated[str, Field(pattern=r"^\S+$", min_length=1, max_length=256)]
    """The ``aud`` the upstream checks."""
    exchange: TokenExchange | None = None
    """Ask an RFC 8693 token-exchange endpoint instead of signing the token ourselves."""
