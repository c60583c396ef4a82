"""The config file → ``GatewaySettings``: for the default listener and for each node group."""

from __future__ import annotations

from control_plane.config import ControlPlaneConfig, Gateway
from control_plane.translator.settings import (
    AccessLogSettings,
    ExtAuthzSettings,
    GatewaySettings,
    RateLimitSettings,
    SheddingSettings,
    TlsSettings,
    TracingSettings,
)


def gateway_settings(config: ControlPlaneConfig, gateway: Gateway) -> GatewaySettings:
    """One listener's settings: ``gateway`` (the default, or a node group's) and the
    services every group shares (ext_authz, ratelimit, access log)."""
    ext_authz = None
    if config.ext_authz is not None:
        ext_authz = ExtAuthzSettings(
            _addresses(config.ext_authz.address),
            config.ext_authz.timeout,
            config.ext_authz.fail_open,
            protocol=config.ext_authz.protocol,
            forward_headers=tuple(h.lower() for h in config.ext_authz.forward_headers),
            public_route_limits=config.ext_authz.public_route_limits,
            features=None if config.ext_authz.features is None else frozenset(config.ext_authz.features),
            require_audience=config.ext_authz.require_audience,
        )
    rate_limit = None
    if config.rate_limit is not None:
        rate_limit = RateLimitSettings(
            _addresses(config.rate_limit.address), config.rate_limit.timeout, config.rate_limit.fail_closed
        )
    access_log = None
    if config.access_log is not None:
        access_log = AccessLogSettings(
            _addresses(config.access_log.address), config.access_log.buffer_size, config.access_log.flush_interval
        )
    tracing = None
    if config.tracing is not None:
        tracing = TracingSettings(
            _addresses(config.tracing.otlp_address)[0],
            config.tracing.sampling_percent,
            config.tracing.service_name,
            config.tracing.timeout,
        )
    return GatewaySettings(
        gateway.listener_address,
        gateway.listener_port,
        ext_authz,
        rate_limit,
        access_log,
        max_request_headers_kb=gateway.max_request_headers_kb,
        max_request_body_bytes=gateway.max_request_body_bytes,
        server_header=gateway.server_header,
        tls=None
        if gateway.tls is None
        else TlsSettings(config.absolute(gateway.tls.cert_file), config.absolute(gateway.tls.key_file)),
        route_stats=gateway.route_stats,
        shedding=None
        if gateway.load_shedding is None
        else SheddingSettings(gateway.load_shedding.latency_target, gateway.load_shedding.max_concurrency),
        tracing=tracing,
        serve_unlimited=config.rate_limits_without_limiter == "serveUnlimited",
        breaker_detection=access_log is not None and config.breakers.tally_credential_file is not None,
    )


def node_group_settings(config: ControlPlaneConfig) -> dict[str, GatewaySettings]:
    """The settings of each node group's own listener (``nodeGroups``)."""
    return {group: gateway_settings(config, gateway) for group, gateway in config.node_groups.items()}


def _addresses(raw: str | list[str]) -> tuple[tuple[str, int], ...]:
    return tuple(
        (host.strip("[]"), int(port)) for host, _, port in (a.rpartition(":") for a in ([raw] if isinstance(raw, str) else raw))
    )
