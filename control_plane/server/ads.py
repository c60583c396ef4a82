"""The gRPC face of the control plane: ADS in both variants over one grpc.aio server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
from envoy.service.discovery.v3 import ads_pb2, ads_pb2_grpc, discovery_pb2

from control_plane.cache.watcher import ConfigWatcher
from control_plane.proxy_status import ProxyStatus
from control_plane.server.delta import DeltaStream
from control_plane.server.sotw import SotwStream
from servicekit.grpc_serving import service_full_name

SERVICE_NAME = service_full_name(ads_pb2.DESCRIPTOR, "AggregatedDiscoveryService")
"""What the health and reflection services call ADS."""

# A 10,000-route RouteConfiguration is several megabytes; gRPC's default cap is 4 MiB.
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
KEEPALIVE_OPTIONS = [
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
]


class AggregatedDiscoveryService(ads_pb2_grpc.AggregatedDiscoveryServiceServicer):  # type: ignore[misc]
    def __init__(self, cache: ConfigWatcher, status: ProxyStatus) -> None:
        self._cache = cache
        self._status = status

    async def StreamAggregatedResources(  # noqa: N802 - gRPC method name
        self,
        request_iterator: AsyncIterator[discovery_pb2.DiscoveryRequest],
        context: grpc.aio.ServicerContext[discovery_pb2.DiscoveryRequest, discovery_pb2.DiscoveryResponse],
    ) -> None:
        await SotwStream(self._cache, self._status, context.write).run(request_iterator)

    async def DeltaAggregatedResources(  # noqa: N802 - gRPC method name
        self,
        request_iterator: AsyncIterator[discovery_pb2.DeltaDiscoveryRequest],
        context: grpc.aio.ServicerContext[discovery_pb2.DeltaDiscoveryRequest, discovery_pb2.DeltaDiscoveryResponse],
    ) -> None:
        await DeltaStream(self._cache, self._status, context.write).run(request_iterator)


def build_server(cache: ConfigWatcher, status: ProxyStatus, address: str) -> grpc.aio.Server:
    server = grpc.aio.server(
        options=[
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", 16 * 1024 * 1024),
            *KEEPALIVE_OPTIONS,
        ]
    )
    ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(AggregatedDiscoveryService(cache, status), server)
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as exc:  # grpcio raises here instead of returning 0
        raise OSError(f"cannot listen for xDS on {address}: {exc}") from exc
    if port == 0:
        raise OSError(f"cannot listen for xDS on {address}")
    return server
