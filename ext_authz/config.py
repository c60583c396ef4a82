"""ext_authz configuration: issuers, revocation, admin, cache. Documented in docs/ext-authz.md.

    listen: 127.0.0.1:9191
    admin: {listen: 127.0.0.1:9192, credentialFile: admin-token}   # gRPC admin API, bearer credential
    metrics: {listen: 127.0.0.1:9193}
    tokenCacheSize: 100000
    maxTokenBytes: 8192
    issuers:
      - issuer: https://auth.example.com/
        audiences: [api]
        algorithms: [RS256, ES256]
        jwksUrl: https://auth.example.com/.well-known/jwks.json     # or jwksFile: keys.json
        leeway: 30s
        requiredClaims: [exp, sub]
        requireJti: true
        claimHeaders: {x-user-id: sub, x-user-role: role, x-scope: scope}
        jwks: {minTtl: 5m, maxTtl: 24h, unknownKidCooldown: 30s, maxStale: 24h, timeout: 2s}
    revocation:
      redisUrl: redis://127.0.0.1:6379/0
      onUnavailable: closed            # closed | open | lastKnown
      lastKnownFor: 60s                # with lastKnown: how long a stale mirror may decide
      resyncInterval: 10s
      timeout: 250ms
    http:                              # Envoy's HTTP ext_authz protocol (extAuthz.protocol: http)
      listen: 127.0.0.1:9196
      routes: {xds: {address: 127.0.0.1:18000, nodeId: ext-authz-0}}   # each route's rules
      rateLimit:                       # decide the limits of routes with auth in the same call
        redis: {url: redis://127.0.0.1:6379/0, timeout: 50ms}
        expectedInstances: 2
        hybrid: {maxBatch: 100}
      waitingRoom: {ticketKeyFile: wr-key}   # routes' waiting rooms (docs/waiting-room.md)
      upstreamTokens: {issuer: https://gateway.internal/, keyFile: signing.pem, ttl: 60s}   # token swap
    workers: 2                         # processes behind the ports; default: the CPUs it may use
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from limiter.config import Hybrid, Policies, Redis
from servicekit.config_file import HostPort, Listen, load_config_file
from servicekit.durations import Duration, Millis
from servicekit.span_export import SpanExport
from servicekit.model import Model
from servicekit.audit_output import AuditOutput
from ext_authz.swap.config import UpstreamTokens
from servicekit.check_contract import PRINCIPAL_HEADER

Algorithm = Literal["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]


class JwksCache(Model):
    min_ttl: Duration = Millis(300_000)
    """Floor for Cache-Control max-age: a tiny max-age cannot make us fetch per request."""
    max_ttl: Duration = Millis(86_400_000)
    """Ceiling: keys are refetched at least this often."""
    unknown_kid_cooldown: Duration = Millis(30_000)
    """An unknown kid triggers at most one refetch per cooldown."""
    max_stale: Duration = Millis(86_400_000)
    """After failed refetches, good keys keep serving this long past their expiry."""
    timeout: Duration = Millis(2_000)


class Issuer(Model):
    issuer: str
    audiences: list[str] = []
    algorithms: list[Algorithm] = ["RS256", "ES256"]
    jwks_url: str | None = None
    jwks_file: str | None = None
    leeway: Duration = Millis(30_000)
    required_claims: list[str] = ["exp", "sub"]
    require_jti: bool = True
    claim_headers: dict[str, str] = {"x-user-id": "sub", "x-user-role": "role", "x-scope": "scope"}
    jwks: JwksCache = JwksCache()

    @model_validator(mode="after")
    def _one_key_source(self) -> Issuer:
        if PRINCIPAL_HEADER in {name.lower() for name in self.claim_headers}:
            raise ValueError(
                f"claimHeaders: {PRINCIPAL_HEADER} is set by the check from the issuer and the user id; "
                "a claim may not fill it (it would name any principal it liked)"
            )
        if (self.jwks_url is None) == (self.jwks_file is None):
            raise ValueError("set exactly one of jwksUrl or jwksFile")
        if self.jwks_url is not None and not self.jwks_url.startswith(("https://", "http://")):
            raise ValueError("jwksUrl must be an http(s) URL")
        return self


class Revocation(Model):
    redis_url: str
    on_unavailable: Literal["closed", "open", "lastKnown"] = "closed"
    last_known_for: Duration = Millis(60_000)
    resync_interval: Duration = Millis(10_000)
    timeout: Duration = Millis(250)
    key_prefix: str = "gatehouse:"



class RateLimit(Model):
    redis: Redis
    expected_instances: Annotated[int, Field(ge=1)] = 1
    """Instances sharing the limits (workers × replicas): onStoreFailure ``local`` allows
    limit ÷ this in each, and hybrid reservations are sized by it."""
    hybrid: Hybrid = Hybrid()


class WaitingRoomKeys(Model):
    ticket_key_file: str
    """HMAC key of waiting-room tickets (at least 32 bytes); the same in every instance."""


class Http(Model):
    listen: HostPort = "127.0.0.1:9196"
    routes: Policies
    """Where each route's requirements and limits come from (the control plane's ADS)."""
    rate_limit: RateLimit | None = None
    """Without it, a route whose limits are meant for this call is refused (NACKed)."""
    waiting_room: WaitingRoomKeys | None = None
    """Waiting rooms (docs/waiting-room.md); they need ``rateLimit`` (its Redis). Without it,
    a route with a waiting room is refused (NACKed)."""

    @model_validator(mode="after")
    def _room_needs_redis(self) -> Http:
        if self.waiting_room is not None and self.rate_limit is None:
            raise ValueError("waitingRoom: needs rateLimit (the rooms live in its Redis)")
        return self
    upstream_tokens: UpstreamTokens | None = None
    """Token swap (``auth.upstreamToken``): without it, a swap route is refused (NACKed)."""


class Admin(Model):
    listen: HostPort
    credential_file: str


class ExtAuthzConfig(Model):
    listen: HostPort = "127.0.0.1:9191"
    admin: Admin | None = None
    metrics: Listen = Listen(listen="127.0.0.1:9193")
    token_cache_size: Annotated[int, Field(ge=0)] = 100_000
    max_token_bytes: Annotated[int, Field(ge=256, le=65536)] = 8192
    issuers: Annotated[list[Issuer], Field(min_length=1)]
    revocation: Revocation | None = None
    audit: AuditOutput | None = None
    """Audit events to Kafka (spooled while it is away); without it, to the log."""
    http: Http | None = None
    """Also serve Envoy's HTTP ext_authz protocol (the lean path): route rules over xDS,
    and the route's rate limits decided in the same call."""
    tracing: SpanExport | None = None
    """Report a span per check to an OTLP collector when Envoy traces the call (docs/tracing.md)."""
    workers: Annotated[int, Field(ge=1, le=256)] | None = None
    """Processes behind the ports (SO_REUSEPORT); None: the CPUs this process may use."""
    base_dir: Annotated[str, Field(exclude=True)] = "."

    def resolve(self, path: str) -> Path:
        candidate = Path(path).expanduser()
        return candidate if candidate.is_absolute() else (Path(self.base_dir) / candidate).resolve()

    @model_validator(mode="after")
    def _distinct_issuers(self) -> ExtAuthzConfig:
        names = [i.issuer for i in self.issuers]
        if len(names) != len(set(names)):
            raise ValueError("issuers: each iss may appear once")
        swap = self.http.upstream_tokens if self.http is not None else None
        if swap is not None and swap.issuer in names:
            raise ValueError(
                f"http.upstreamTokens.issuer: {swap.issuer[:200]!r} is also issuers[{names.index(swap.issuer)}]: "
                "the tokens this service signs for upstreams would be accepted back at the gateway, "
                "from any upstream that saw one; give token swap an issuer of its own"
            )
        return self


def load_ext_authz_config(path: Path) -> ExtAuthzConfig:
    return load_config_file(path, ExtAuthzConfig)
