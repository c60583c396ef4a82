"""ext_authz's parts built in the benchmark's own process from a running service's config
file (keys, verifier, revocation mirror on the same Redis, logs to a file as the service
writes them), so a benchmark can time a handler alone, without the server around it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import structlog

from ext_authz.config import ExtAuthzConfig, load_ext_authz_config
from ext_authz.tokens.jwks import IssuerKeys
from ext_authz.revocation.mirror import RevocationMirror
from ext_authz.runtime import GRACE_MARGIN
from ext_authz.service import Authorizer
from ext_authz.tokens.verifier import TokenVerifier
from servicekit.logs import configure_logging


@dataclass
class AuthzParts:
    config: ExtAuthzConfig
    verifier: TokenVerifier
    mirror: RevocationMirror | None
    """None when the config has no revocation."""
    authorizer: Authorizer


@asynccontextmanager
async def authz_parts(config_path: Path, log_path: Path) -> AsyncIterator[AuthzParts]:
    """The service's keys (started), verifier and revocation mirror (ready), an Authorizer
    over them; structlog writes to ``log_path`` meanwhile. Everything closed on the way out."""
    config = load_ext_authz_config(config_path)
    configure_logging("debug", "json")  # what the harness passes to the service
    with open(log_path, "a") as log_file:
        structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=log_file))
        keys = [IssuerKeys.from_config(i, session=None, base_dir=Path(config.base_dir)) for i in config.issuers]
        mirror = None
        try:
            for k in keys:
                await k.start()
            verifier = TokenVerifier(keys, cache_size=config.token_cache_size, max_token_bytes=config.max_token_bytes)
            if config.revocation is not None:
                mirror = RevocationMirror.from_config(config.revocation, grace=max(i.leeway.seconds for i in config.issuers) + GRACE_MARGIN)
                await mirror.start()
                if not await mirror.wait_ready(10):
                    raise RuntimeError("revocation mirror not ready")
            yield AuthzParts(config, verifier, mirror, Authorizer(verifier, {i.issuer: i for i in config.issuers}, mirror))
        finally:
            if mirror is not None:
                await mirror.stop()
            for k in keys:
                await k.close()
            structlog.reset_defaults()
