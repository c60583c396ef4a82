"""A trivial RateLimitService: grpc.aio with ratelimit_svc's server options, answers OK to
every request. ``bench.ratelimit`` puts it behind a second gateway: bare grpcio's cost per
decision.

    python -m bench.standins.trivial_ratelimit 127.0.0.1:PORT
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import grpc
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

OK = rls_pb2.RateLimitResponse(overall_code=rls_pb2.RateLimitResponse.OK)


class Trivial(rls_pb2_grpc.RateLimitServiceServicer):  # type: ignore[misc]
    async def ShouldRateLimit(self, request: Any, context: Any) -> Any:
        return OK


async def serve(address: str) -> None:
    server = grpc.aio.server()
    rls_pb2_grpc.add_RateLimitServiceServicer_to_server(Trivial(), server)
    server.add_insecure_port(address)
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1]))
