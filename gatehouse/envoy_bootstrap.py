"""Render the Envoy bootstrap for one Envoy: which node it is and where ADS lives.

The template ships inside the package (``gatehouse/data/envoy-bootstrap.yaml``, linked
from ``envoy/bootstrap.yaml``), so an installed wheel renders it too.
"""

from __future__ import annotations

import os
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

TEMPLATE = Path(os.environ.get("GATEHOUSE_ENVOY_BOOTSTRAP", Path(__file__).resolve().parent / "data" / "envoy-bootstrap.yaml"))


FIXED_HEAP = "envoy.resource_monitors.fixed_heap"
DOWNSTREAM_CONNECTIONS = "envoy.resource_monitors.global_downstream_max_connections"


@dataclass(frozen=True, slots=True)
class OverloadSettings:
    """Envoy's overload manager: a hard cap on downstream connections (a proactive monitor:
    connections over the cap are closed at accept) and a fixed heap budget whose pressure
    first shrinks the heap, then stops new connections, then answers new requests 503."""

    max_connections: int = 50_000
    max_heap_bytes: int = 1024 * 1024 * 1024
    shrink_heap_at: float = 0.95
    stop_accepting_connections_at: float = 0.95
    stop_accepting_requests_at: float = 0.98


def _trigger(threshold: float) -> list[dict[str, Any]]:
    return [{"name": FIXED_HEAP, "threshold": {"value": threshold}}]


def overload_manager(settings: OverloadSettings) -> dict[str, Any]:
    return {
        "refresh_interval": "0.25s",
        "resource_monitors": [
            {
                "name": FIXED_HEAP,
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.resource_monitors.fixed_heap.v3.FixedHeapConfig",
                    "max_heap_size_bytes": settings.max_heap_bytes,
                },
            },
            {
                "name": DOWNSTREAM_CONNECTIONS,
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig",
                    "max_active_downstream_connections": settings.max_connections,
                },
            },
        ],
        "actions": [
            {"name": "envoy.overload_actions.shrink_heap", "triggers": _trigger(settings.shrink_heap_at)},
            {
                "name": "envoy.overload_actions.stop_accepting_connections",
                "triggers": _trigger(settings.stop_accepting_connections_at),
            },
            {
                "name": "envoy.overload_actions.stop_accepting_requests",
                "triggers": _trigger(settings.stop_accepting_requests_at),
            },
        ],
    }


def render_bootstrap(
    *,
    xds_host: str,
    xds_port: int,
    admin_port: int,
    node_id: str = "gateway-0",
    node_cluster: str = "gateway",
    admin_address: str = "127.0.0.1",
    delta: bool = False,
    overload: OverloadSettings | None = None,
) -> dict[str, Any]:
    text = string.Template(TEMPLATE.read_text()).substitute(
        NODE_ID=node_id,
        NODE_CLUSTER=node_cluster,
        ADMIN_ADDRESS=admin_address,
        ADMIN_PORT=admin_port,
        ADS_API_TYPE="DELTA_GRPC" if delta else "GRPC",
        XDS_HOST=xds_host,
        XDS_PORT=xds_port,
    )
    data: dict[str, Any] = yaml.safe_load(text)
    if overload is not None:
        data["overload_manager"] = overload_manager(overload)
    return data
