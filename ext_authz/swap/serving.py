"""Token swap's parts built from the config, and the JWKS route on the metrics port.

Upstreams verify internal tokens with the JWKS at ``GET /.well-known/jwks.json`` on
ext_authz's metrics/admin HTTP port (with ``workers``, the supervisor answers it from a
worker; every worker loads the same key file).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import aiohttp
from aiohttp import web

from ext_authz.swap.exchange import TokenExchange
from ext_authz.swap.signer import UpstreamSigner
from ext_authz.swap.tokens import SwapGrants, UpstreamTokens
from ext_authz.swap.config import UpstreamTokens as UpstreamTokensConfig

JWKS_PATH = "/.well-known/jwks.json"
JWKS_MAX_AGE = 300


def build_upstream_tokens(
    config: UpstreamTokensConfig, session: aiohttp.ClientSession, resolve: Callable[[str], Path]
) -> UpstreamTokens:
    """SigningKeyError (names the file) when the key is unusable: the process does not start."""
    signer = None
    if config.key_file is not None:
        signer = UpstreamSigner.from_file(resolve(config.key_file), issuer=config.issuer, key_id=config.key_id)
    grants = SwapGrants(
        {namespace: frozenset(audiences) for namespace, audiences in config.audiences.items()},
        frozenset(config.exchange.endpoints),
    )
    return UpstreamTokens(
        signer=signer,
        exchange=TokenExchange(session, timeout=config.exchange.timeout.seconds),
        ttl=config.ttl.seconds,
        cache_size=config.cache_size,
        grants=grants,
    )


def jwks_routes(tokens: UpstreamTokens | None) -> list[web.RouteDef]:
    """``GET /.well-known/jwks.json``: the signing key's public half (empty set without one)."""
    if tokens is None:
        return []
    body = {"keys": []} if tokens.signer is None else tokens.signer.jwks()

    async def jwks(_: web.Request) -> web.Response:
        return web.json_response(body, headers={"cache-control": f"max-age={JWKS_MAX_AGE}"})

    return [web.get(JWKS_PATH, jwks)]
