"""gRPC health checking (grpc.health.v1) and server reflection on a Gatehouse gRPC server.

Load balancers and Kubernetes' gRPC probes ask the health service, not /readyz, so it
must say the same thing: NOT_SERVING until the service's readiness (the very function
/readyz calls) is true, SERVING while it is, NOT_SERVING again when it turns false, and
NOT_SERVING for good once shutdown begins, before the server stops, so that clients
watching the status drain away first.

Readiness is polled rather than pushed: it is a cheap in-memory check, and part of it
changes with the clock alone (JWKS keys going stale), so there is no event to hook and
no hook to forget in each service.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from servicekit.admin_http import Readiness

log = structlog.get_logger(component="grpc_serving")

POLL_SECONDS = 0.5
"""How stale the gRPC health status may be behind /readyz."""
OVERALL = ""
"""The health service's name for the server as a whole."""
HEALTH_SERVICE: str = health.SERVICE_NAME
REFLECTION_SERVICE: str = reflection.SERVICE_NAME
PUBLIC_SERVICES = frozenset({HEALTH_SERVICE, REFLECTION_SERVICE})
"""What this module adds: answered without a service's own credentials (probes carry none)."""

_SERVING = health_pb2.HealthCheckResponse.SERVING
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def always_ready() -> tuple[bool, str]:
    """Readiness of a server that is ready as soon as it listens."""
    return True, "listening"


class GrpcServing:
    """Health and reflection on one grpc.aio server, and that server's start and stop.

    Build it before the server starts (gRPC takes no new services after that), then use
    ``start()`` and ``stop()`` in place of the server's own: they put the health status
    changes on the right side of listening and of stopping.
    """

    def __init__(
        self,
        server: grpc.aio.Server,
        services: Iterable[str],
        readiness: Readiness,
        *,
        what: str,
        poll_interval: float = POLL_SECONDS,
    ) -> None:
        self._server = server
        self._services = tuple(services)
        self._readiness = readiness
        self._what = what
        self._poll_interval = poll_interval
        self._health = health.aio.HealthServicer()
        self._serving: bool | None = None
        self._follower: asyncio.Task[None] | None = None
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection((*self._services, HEALTH_SERVICE, REFLECTION_SERVICE), server)

    async def start(self) -> None:
        """NOT_SERVING first (the servicer starts out SERVING), then listen, then follow readiness."""
        await self._set(False)
        await self._server.start()
        await self.refresh()
        self._follower = asyncio.create_task(self._follow(), name=f"grpc-health:{self._what}")

    async def refresh(self) -> None:
        """Take readiness now; a caller that knows it just changed need not wait for the poll."""
        try:
            ready, reason = self._readiness()
        except Exception:  # noqa: BLE001 - a broken check must read as unready, not freeze the status
            log.exception("readiness_check_failed", server=self._what)
            ready, reason = False, "readiness check failed"
        if ready != self._serving:
            await self._set(ready)
            log.info("grpc_health_status", server=self._what, status="SERVING" if ready else "NOT_SERVING", reason=reason)

    async def stop(self, grace: float) -> None:
        """NOT_SERVING for good (watchers are told while still connected), then stop the server."""
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follower
        await self._health.enter_graceful_shutdown()
        self._serving = False
        log.info("grpc_health_status", server=self._what, status="NOT_SERVING", reason="shutting down")
        await self._server.stop(grace)

    async def _follow(self) -> None:
        while True:
            await asyncio.sleep(self._poll_interval)
            await self.refresh()

    async def _set(self, ready: bool) -> None:
        status = _SERVING if ready else _NOT_SERVING
        for name in (OVERALL, *self._services):
            await self._health.set(name, status)
        self._serving = ready


def service_full_name(file_descriptor: Any, service: str) -> str:
    """``package.Service`` of ``service`` in a generated ``*_pb2.DESCRIPTOR``: the name
    health and reflection use, taken from the proto rather than spelled out again."""
    name: str = file_descriptor.services_by_name[service].full_name
    return name
