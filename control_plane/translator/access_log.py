"""Envoy's gRPC access logger on the gateway listener, streaming to the telemetry service.

Envoy buffers entries itself (``buffer_size_bytes``, ``buffer_flush_interval``) and sends
them on one long-lived stream, off the request path: a slow or absent telemetry service
never delays a request; Envoy drops what it cannot send (``access_logs.grpc_access_log.logs_dropped``).
"""

from __future__ import annotations

from typing import Any

from control_plane.translator.feature import HttpFeature
from control_plane.translator.latency_stamps import STAMP_KEYS
from control_plane.translator.service_clusters import grpc_service_cluster
from control_plane.translator.settings import AccessLogSettings as AccessLogSettings
from control_plane.translator.settings import GatewaySettings
from servicekit.access_log_contract import LOGGED_REQUEST_HEADERS, LOGGED_RESPONSE_HEADERS
from servicekit.durations import format_duration_ms

ACCESS_LOG_CLUSTER = "gatehouse_access_log"
ACCESS_LOGGER = "envoy.access_loggers.http_grpc"
ACCESS_LOG_TYPE = "type.googleapis.com/envoy.extensions.access_loggers.grpc.v3.HttpGrpcAccessLogConfig"
LOG_NAME = "gatehouse"


def access_log(settings: AccessLogSettings) -> dict[str, Any]:
    """One ``access_log`` entry for the HTTP connection manager."""
    return {
        "name": ACCESS_LOGGER,
        "typed_config": {
            "@type": ACCESS_LOG_TYPE,
            "common_config": {
                "log_name": LOG_NAME,
                "grpc_service": {"envoy_grpc": {"cluster_name": ACCESS_LOG_CLUSTER}},
                "transport_api_version": "V3",
                "buffer_size_bytes": settings.buffer_size_bytes,
                "buffer_flush_interval": format_duration_ms(settings.flush_interval_ms),
                # The checks' latencies (latency_stamps); absent keys are not sent.
                "filter_state_objects_to_log": list(STAMP_KEYS),
            },
            "additional_request_headers_to_log": list(LOGGED_REQUEST_HEADERS),
            "additional_response_headers_to_log": list(LOGGED_RESPONSE_HEADERS),
        },
    }


def access_log_cluster(settings: AccessLogSettings) -> dict[str, Any]:
    return grpc_service_cluster(ACCESS_LOG_CLUSTER, settings.addresses)


class AccessLog(HttpFeature):
    """Not an HTTP filter: the connection manager's logger, and the telemetry cluster."""

    name = ACCESS_LOGGER

    def connection_manager(self, settings: GatewaySettings) -> dict[str, Any]:
        return {} if settings.access_log is None else {"access_log": [access_log(settings.access_log)]}

    def clusters(self, settings: GatewaySettings) -> list[dict[str, Any]]:
        return [] if settings.access_log is None else [access_log_cluster(settings.access_log)]
