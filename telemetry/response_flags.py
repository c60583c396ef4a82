"""Envoy's response flags as the short codes its own access log prints (``%RESPONSE_FLAGS%``).

The table maps each ``envoy.data.accesslog.v3.ResponseFlags`` field to its code, so an
event reads the same as a line from Envoy's file logger.
"""

from __future__ import annotations

from typing import Any, Final

CODES: Final[dict[str, str]] = {
    "failed_local_healthcheck": "LH",
    "no_healthy_upstream": "UH",
    "upstream_request_timeout": "UT",
    "local_reset": "LR",
    "upstream_remote_reset": "UR",
    "upstream_connection_failure": "UF",
    "upstream_connection_termination": "UC",
    "upstream_overflow": "UO",
    "no_route_found": "NR",
    "delay_injected": "DI",
    "fault_injected": "FI",
    "rate_limited": "RL",
    "unauthorized_details": "UAEX",
    "rate_limit_service_error": "RLSE",
    "downstream_connection_termination": "DC",
    "upstream_retry_limit_exceeded": "URX",
    "stream_idle_timeout": "SI",
    "invalid_envoy_request_headers": "IH",
    "downstream_protocol_error": "DPE",
    "upstream_max_stream_duration_reached": "UMSDR",
    "response_from_cache_filter": "RFCF",
    "no_filter_config_found": "NFCF",
    "duration_timeout": "DT",
    "upstream_protocol_error": "UPE",
    "no_cluster_found": "NC",
    "overload_manager": "OM",
    "dns_resolution_failure": "DF",
    "downstream_remote_reset": "DRR",
}


def short_codes(flags: Any) -> list[str]:
    """The codes of the set flags, in Envoy's field order. Costs almost nothing when none is set."""
    if not flags.ByteSize():
        return []
    return [CODES.get(descriptor.name, descriptor.name) for descriptor, value in flags.ListFields() if value]
