"""Trivial grpc.aio servicers, each with its Gatehouse service's server options, answering OK
to every call: put behind a gateway in place of ext_authz (``authz``) or ratelimit_svc
(``ratelimit``), they measure what bare grpcio costs per check or decision.

    python -m bench.standins.trivial authz 127.0.0.1:PORT
    python -m bench.standins.trivial ratelimit 127.0.0.1:PORT
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import grpc
from envoy.service.auth.v3 import external_auth_pb2, external_auth_pb2_grpc
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
from google.rpc import code_pb2, status_pb2

CHECK_OK = external_auth_pb2.CheckResponse(status=status_pb2.Status(code=code_pb2.OK))
LIMIT_OK = rls_pb2.RateLimitResponse(overall_code=rls_pb2.RateLimitResponse.OK)


class TrivialAuthorization(external_auth_pb2_grpc.AuthorizationServicer):  # type: ignore[misc]
    async def Check(self, request: Any, context: Any) -> Any:
        return CHECK_OK


class TrivialRateLimit(rls_pb2_grpc.RateLimitServiceServicer):  # type: ignore[misc]
    async def ShouldRateLimit(self, request: Any, context: Any) -> Any:
        return LIMIT_OK


async def serve(kind: str, address: str) -> None:
    if kind == "authz":
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])  # ext_authz's options
        external_auth_pb2_grpc.add_AuthorizationServicer_to_server(TrivialAuthorization(), server)
    elif kind == "ratelimit":
        server = grpc.aio.server()  # ratelimit_svc's
        rls_pb2_grpc.add_RateLimitServiceServicer_to_server(TrivialRateLimit(), server)
    else:
        raise SystemExit(f"usage: python -m bench.standins.trivial authz|ratelimit ADDRESS (not {kind!r})")
    server.add_insecure_port(address)
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], sys.argv[2]))
