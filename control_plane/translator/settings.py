"""What the translator needs to know about the gateway besides the routes.

One value per node group (``from_config.gateway_settings`` builds it from the config file);
each feature module reads its own part (``ext_authz``, ``rate_limit``, ...), so the part
classes live here with the whole and the feature modules import them, never the reverse.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


CHECK_FEATURES = ("waitingRoom", "apiKeys", "signedUpstreamTokens", "tokenExchange")
"""What an Authorization service may lack: a waiting-room ticket key, a key store, a
signing key for token swap, token exchange at all (ext_authz's config)."""


@dataclass(frozen=True, slots=True)
class ExtAuthzSettings:
    addresses: tuple[tuple[str, int], ...]
    """(host, port) of each Authorization service instance."""
    timeout_ms: int = 250
    fail_open: bool = False
    """When the service cannot be reached: False answers 503 (the default), True lets the request through."""
    protocol: Literal["grpc", "http"] = "grpc"
    """``http``: Envoy's HTTP ext_authz protocol; the route is named by a header, its rules
    and its rate limits go to the service over xDS, and one call decides both."""
    forward_headers: tuple[str, ...] = ()
    """Over HTTP, request headers sent to the service besides the ones it always reads
    (for ``header:<name>`` rate-limit keys on authenticated routes)."""
    public_route_limits: bool = True
    """Over HTTP (and with rate limits enforced), a public route's limits are decided by the
    same service, through a second ext_authz filter that follows the RateLimitService's
    failure policy, instead of by ratelimit_svc."""
    features: frozenset[str] | None = None
    """What the check behind the address is configured for (``CHECK_FEATURES``); a route
    needing one it lacks is refused here. None: not declared, the check itself refuses
    (per route, fail closed) what it cannot serve."""
    require_audience: bool = False
    """A route that reads tokens must name ``auth.audiences``; one that names none is
    refused (without an audience, a token collected by any backend replays on it)."""

    @property
    def decides_limits(self) -> bool:
        return self.protocol == "http"


@dataclass(frozen=True, slots=True)
class RateLimitSettings:
    addresses: tuple[tuple[str, int], ...]
    timeout_ms: int = 100
    fail_closed: bool = False
    """When ratelimit_svc cannot be reached: False lets requests through (the default), True answers 500."""


@dataclass(frozen=True, slots=True)
class AccessLogSettings:
    addresses: tuple[tuple[str, int], ...]
    buffer_size_bytes: int = 16_384
    flush_interval_ms: int = 1000


@dataclass(frozen=True, slots=True)
class TracingSettings:
    address: tuple[str, int]
    """(host, port) of the collector's OTLP/gRPC receiver."""
    sampling_percent: float = 100.0
    service_name: str = "gatehouse-gateway"
    timeout_ms: int = 1000


@dataclass(frozen=True, slots=True)
class TlsSettings:
    cert_file: str
    """PEM certificate chain (absolute path, as Envoy sees it)."""
    key_file: str
    """PEM private key (absolute path)."""


@dataclass(frozen=True, slots=True)
class SheddingSettings:
    latency_target_ms: int
    """Low-priority requests slower than this (× 1.25, at the percentile) shrink their limit."""
    max_concurrency: int
    percentile: float = 90.0
    update_interval_ms: int = 100


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    listener_address: str = "0.0.0.0"
    listener_port: int = 8080
    ext_authz: ExtAuthzSettings | None = None
    rate_limit: RateLimitSettings | None = None
    access_log: AccessLogSettings | None = None
    max_request_headers_kb: int = 60
    """Request headers beyond this many KiB are answered 431."""
    max_request_body_bytes: int = 10 * 1024 * 1024
    """Request bodies beyond this are answered 413 (0: no limit)."""
    server_header: str = "gatehouse"
    """The ``server`` response header; "" sends none (an upstream's own is removed either way)."""
    tls: TlsSettings | None = None
    """TLS termination on the listener (certificate and key files); None: plain HTTP."""
    route_stats: bool = True
    """Per-route Envoy stats (``stat_prefix``), for golden signals per route; about 2 KiB of
    Envoy memory per route and virtual host."""
    shedding: SheddingSettings | None = None
    """The latency-driven concurrency limit on ``low`` routes; None: off."""
    tracing: TracingSettings | None = None
    """OpenTelemetry tracing in the connection manager; None: off."""
    serve_unlimited: bool = False
    """A route with ``rateLimits`` on a gateway without a rate-limit service: False refuses it
    (the default), True serves it without its limits (``rateLimitsWithoutLimiter``)."""
    breaker_detection: bool = False
    """Whether breaker tallies can reach the board (an access log to telemetry and a tally
    credential): without it an ``errorRate`` breaker moves only by operator."""
