"""The ratelimit_svc process: policies from the control plane, the limiter, gRPC, /metrics.

Readiness (GET /readyz on the metrics port): the first policy table has arrived. Redis
is not part of readiness: with Redis down each limit follows its onStoreFailure policy,
which is the point of having one. The gRPC health service (grpc.health.v1) on the
RateLimitService port follows it (see servicekit/grpc_serving.py).
"""

from __future__ import annotations

import asyncio
import gc

import grpc
import structlog
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

from servicekit.admin_http import AdminServer
from servicekit.grpc_serving import GrpcServing, service_full_name
from servicekit.span_export import SpanExporter
from ratelimit_svc.config import RateLimitConfig
from limiter.config import build_limiter
from limiter.policies import PolicySource
from ratelimit_svc.service import PolicyTable, RateLimitService

log = structlog.get_logger(component="ratelimit")

SERVICE_NAME = service_full_name(rls_pb2.DESCRIPTOR, "RateLimitService")


class RateLimitProcess:
    def __init__(self, config: RateLimitConfig) -> None:
        self.config = config
        self.table = PolicyTable()
        self.policies = PolicySource(
            config.policies.xds.address,
            node_id=config.policies.xds.node_id,
            cluster=config.policies.xds.cluster,
            on_update=self.table.apply,
        )

    def readiness(self) -> tuple[bool, str]:
        if not self.policies.synced.is_set():
            return False, "no rate-limit policies from the control plane yet"
        return True, "ready"

    async def run(self) -> None:
        config = self.config
        limiter = build_limiter(config.redis, config.hybrid, expected_instances=config.expected_instances)
        server = grpc.aio.server()
        spans = SpanExporter(config.tracing) if config.tracing is not None else None
        rls_pb2_grpc.add_RateLimitServiceServicer_to_server(RateLimitService(limiter, self.table, spans=spans), server)
        try:
            server.add_insecure_port(config.listen)
        except RuntimeError as exc:
            raise OSError(f"cannot listen for ratelimit on {config.listen}: {exc}") from exc
        serving = GrpcServing(server, [SERVICE_NAME], self.readiness, what="ratelimit")
        http = AdminServer(config.metrics.listen, readiness=self.readiness)
        policies = asyncio.create_task(self.policies.run(), name="policies")
        await serving.start()
        await http.start()
        if spans is not None:
            spans.start()
        log.info("ratelimit_started", listen=config.listen, redis=_redacted(config.redis.url))
        # No collection first: it would hold the loop (gatehouse/commands/serve.py collects before it starts).
        gc.freeze()
        try:
            await asyncio.Event().wait()
        finally:
            policies.cancel()
            await serving.stop(grace=1.0)
            await limiter.close()  # hybrid: unused reserved tokens go back
            if spans is not None:
                await spans.stop()
            await http.stop()


def _redacted(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = "***@" + rest.split("@", 1)[1]
    return f"{scheme}{sep}{rest}"
