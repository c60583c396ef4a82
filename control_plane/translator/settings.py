"""What the translator needs to know about the gateway besides the routes."""

from __future__ import annotations

from dataclasses import dataclass

from control_plane.translator.access_log import AccessLogSettings
from control_plane.translator.ext_authz import ExtAuthzSettings
from control_plane.translator.load_shedding import SheddingSettings
from control_plane.translator.ratelimit import RateLimitSettings
from control_plane.translator.tls import TlsSettings


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
