"""Distributed tracing: Envoy's OpenTelemetry tracer in the connection manager.

Envoy continues a caller's W3C ``traceparent`` or starts a trace, sends the context to
the upstream and to its own calls out (ext_authz over HTTP or gRPC, the ratelimit
service's gRPC call; each gets a child span), and exports its spans over OTLP/gRPC to the
``gatehouse_otlp`` cluster off the request path: Envoy batches them and drops what the
collector does not take, so a slow or absent collector never delays a request.
``samplingPercent`` applies to requests that start a trace; a caller's sampled
``traceparent`` is followed. Off unless the config has ``tracing`` (no tracing work then).
"""

from __future__ import annotations

from typing import Any

from control_plane.translator.feature import HttpFeature
from control_plane.translator.service_clusters import grpc_service_cluster
from control_plane.translator.settings import GatewaySettings, TracingSettings
from servicekit.durations import format_duration_ms

OTLP_CLUSTER = "gatehouse_otlp"
TRACER = "envoy.tracers.opentelemetry"
TRACER_TYPE = "type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig"


def tracing(settings: TracingSettings) -> dict[str, Any]:
    """The connection manager's ``tracing`` block."""
    return {
        "random_sampling": {"value": settings.sampling_percent},
        "provider": {
            "name": TRACER,
            "typed_config": {
                "@type": TRACER_TYPE,
                "grpc_service": {
                    "envoy_grpc": {"cluster_name": OTLP_CLUSTER},
                    "timeout": format_duration_ms(settings.timeout_ms),
                },
                "service_name": settings.service_name,
            },
        },
    }


class Tracing(HttpFeature):
    """Not an HTTP filter: the connection manager's tracer, and the collector's cluster."""

    name = TRACER

    def connection_manager(self, settings: GatewaySettings) -> dict[str, Any]:
        return {} if settings.tracing is None else {"tracing": tracing(settings.tracing)}

    def clusters(self, settings: GatewaySettings) -> list[dict[str, Any]]:
        return [] if settings.tracing is None else [grpc_service_cluster(OTLP_CLUSTER, (settings.tracing.address,))]
