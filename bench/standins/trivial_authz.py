"""A trivial Authorization service: grpc.aio with ext_authz's server options, answers OK to
every check. ``bench.authz`` puts it behind a second gateway: bare grpcio's cost per check.

    python -m bench.standins.trivial_authz 127.0.0.1:PORT
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import grpc
from envoy.service.auth.v3 import external_auth_pb2, external_auth_pb2_grpc
from google.rpc import code_pb2, status_pb2

OK = external_auth_pb2.CheckResponse(status=status_pb2.Status(code=code_pb2.OK))


class Trivial(external_auth_pb2_grpc.AuthorizationServicer):  # type: ignore[misc]
    async def Check(self, request: Any, context: Any) -> Any:
        return OK


async def serve(address: str) -> None:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    external_auth_pb2_grpc.add_AuthorizationServicer_to_server(Trivial(), server)
    server.add_insecure_port(address)
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1]))
