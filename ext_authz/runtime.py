"""The ext_authz process: keys, verifier, revocation mirror, the gRPC services, the HTTP
check, /metrics.

Readiness (GET /readyz on the metrics port) means: every issuer has usable keys, the
revocation mirror (if configured) has completed its first sync, and, with ``http``, the
first route table has arrived from the control plane. The gRPC health service
(grpc.health.v1) on the Authorization port follows it (see servicekit/grpc_serving.py).

As one of ``workers`` (servicekit/workers.py), every port is bound with SO_REUSEPORT, the
admin HTTP (/readyz, /metrics) is on an ephemeral loopback port the supervisor merges,
and the audit spool is the worker's own (a spool is locked by one process).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Callable
from pathlib import Path

import aiohttp
import grpc
import structlog
from envoy.service.auth.v3 import external_auth_pb2, external_auth_pb2_grpc

from ext_authz import metrics
from ext_authz.admin.service import build_admin_server, read_credential
from ext_authz.check.api_keys import ApiKeyCheck
from ext_authz.config import ExtAuthzConfig
from ext_authz.tokens.jwks import IssuerKeys
from ext_authz.revocation.mirror import RevocationMirror
from ext_authz.service import Authorizer, AuthorizationService
from ext_authz.tokens.verifier import TokenVerifier
from ext_authz.check.http_check import HttpCheck
from ext_authz.check.route_table import RouteSubscription, RouteTable
from ext_authz.check.steps import CheckParts
from ext_authz.check.validation import Compiler
from ext_authz.check.tickets import TicketSigner, read_key
from ext_authz.check.waiting_room import WaitingRoomGate
from limiter.engine import Limiter
from limiter.waiting_room_store import WaitingRoomStore
from ext_authz.swap.tokens import UpstreamTokens
from ext_authz.swap.serving import build_upstream_tokens, jwks_routes
from limiter.config import build_limiter
from servicekit.admin_http import AdminServer
from servicekit.http1_server import Http1Server
from servicekit.workers import announce_admin_port, worker_index
from servicekit.audit import AuditSink
from servicekit.grpc_serving import GrpcServing, service_full_name
from servicekit.audit_output import AuditChannel
from servicekit.span_export import SpanExporter

log = structlog.get_logger(component="ext_authz")

# A revocation outlives its token's exp by at least the largest leeway (tokens are
# accepted until exp + leeway), plus this margin for clock differences.
GRACE_MARGIN = 60.0
AUDIT_WINDOW = 10.0
SERVICE_NAME = service_full_name(external_auth_pb2.DESCRIPTOR, "Authorization")


def _per_worker(resolve: Callable[[str], Path]) -> Callable[[str], Path]:
    """Paths as the config resolves them; a worker's spool in its own subdirectory."""
    index = worker_index()
    if index is None:
        return resolve
    return lambda path: resolve(path) / f"worker-{index}"


def waiting_room_gate(limiter: Limiter, key_file: Path) -> WaitingRoomGate:
    """Rooms in the limiter's Redis (same pool and breaker), tickets signed with the key file's key."""
    return WaitingRoomGate(WaitingRoomStore(limiter.redis), TicketSigner(read_key(key_file)), limiter.local)


class ExtAuthz:
    def __init__(self, config: ExtAuthzConfig, *, audit: AuditSink | None = None) -> None:
        self.config = config
        self._channel = AuditChannel(config.audit if audit is None else None, _per_worker(config.resolve))
        self.audit = audit or self._channel
        self.keys: list[IssuerKeys] = []
        self.mirror: RevocationMirror | None = None
        self.routes: RouteSubscription | None = None

    def readiness(self) -> tuple[bool, str]:
        missing = [k.issuer.issuer for k in self.keys if not k.has_keys]
        if not self.keys or missing:
            return False, "no usable keys for: " + ", ".join(missing or ["(starting)"])
        if self.mirror is not None and not self.mirror.ready:
            return False, "revocation mirror not synced"
        if self.routes is not None and not self.routes.synced:
            return False, "no route table from the control plane yet"
        return True, "ready"

    def _upstream_tokens(self, session: aiohttp.ClientSession) -> UpstreamTokens | None:
        """Token swap's signer and exchange client (``http.upstreamTokens``), if configured."""
        http = self.config.http
        if http is None or http.upstream_tokens is None:
            return None
        return build_upstream_tokens(http.upstream_tokens, session, self.config.resolve)

    def _http_check(
        self, authorizer: Authorizer, service: AuthorizationService, spans: SpanExporter | None, tokens: UpstreamTokens | None
    ) -> Http1Server:
        """The lean HTTP transport: the route table from the control plane, the limiter."""
        http = self.config.http
        assert http is not None
        limiter = None
        if http.rate_limit is not None:
            limiter = build_limiter(http.rate_limit.redis, http.rate_limit.hybrid, expected_instances=http.rate_limit.expected_instances)
        rooms = None
        if http.waiting_room is not None:
            assert limiter is not None  # the config refuses waitingRoom without rateLimit
            rooms = waiting_room_gate(limiter, self.config.resolve(http.waiting_room.ticket_key_file))
        keys = ApiKeyCheck(self.mirror) if self.mirror is not None else None  # API keys live beside revocations
        parts = CheckParts(authorizer, service.denial_audit, limiter, rooms, keys, tokens, Compiler())
        table = RouteTable(parts)
        self.routes = RouteSubscription(table, http.routes)
        return Http1Server(http.listen, HttpCheck(table, spans=spans))

    async def run(self) -> None:
        await self._channel.start()  # replays a spool left by an earlier run first
        try:
            await self._serve()
        finally:
            await self._channel.stop()

    async def _serve(self) -> None:
        config = self.config
        timeout = aiohttp.ClientTimeout(total=max(i.jwks.timeout.seconds for i in config.issuers))
        async with aiohttp.ClientSession(timeout=timeout) as session:
            self.keys = [
                IssuerKeys.from_config(issuer, session=session, base_dir=Path(config.base_dir)) for issuer in config.issuers
            ]
            for keys in self.keys:
                await keys.start()
            verifier = TokenVerifier(self.keys, cache_size=config.token_cache_size, max_token_bytes=config.max_token_bytes)
            metrics.register_verifier(verifier, self.keys)
            if config.revocation is not None:
                grace = max(i.leeway.seconds for i in config.issuers) + GRACE_MARGIN
                self.mirror = RevocationMirror.from_config(config.revocation, grace=grace)
                await self.mirror.start()
            else:
                log.warning("revocation_disabled", detail="no revocation: configured; jti and blocked subjects are not checked")
            authorizer = Authorizer(verifier, {i.issuer: i for i in config.issuers}, self.mirror)
            shared = worker_index() is not None
            server = grpc.aio.server(options=[("grpc.so_reuseport", 1 if shared else 0)])
            spans = SpanExporter(config.tracing) if config.tracing is not None else None
            service = AuthorizationService(authorizer, self.audit, spans=spans)
            external_auth_pb2_grpc.add_AuthorizationServicer_to_server(service, server)
            try:
                server.add_insecure_port(config.listen)
            except RuntimeError as exc:
                raise OSError(f"cannot listen for ext_authz on {config.listen}: {exc}") from exc
            serving = GrpcServing(server, [SERVICE_NAME], self.readiness, what="ext_authz")
            tokens = self._upstream_tokens(session)
            http = AdminServer(
                "127.0.0.1:0" if shared else config.metrics.listen, readiness=self.readiness, routes=jwks_routes(tokens)
            )
            admin = None
            if config.admin is not None:
                if self.mirror is None:
                    raise ValueError("admin: needs revocation: (the admin API manages revocations)")
                credential = read_credential(config.resolve(config.admin.credential_file))
                admin = build_admin_server(self.mirror, self.audit, credential, config.admin.listen, reuse_port=shared)
            check_server = self._http_check(authorizer, service, spans, tokens) if config.http is not None else None
            await serving.start()
            await http.start()
            announce_admin_port(http.port)
            if spans is not None:
                spans.start()
            if admin is not None:
                await admin.start()
            if check_server is not None:
                assert self.routes is not None
                self.routes.start()
                await check_server.start()
            log.info("ext_authz_started", listen=config.listen, issuers=[i.issuer for i in config.issuers])
            # The long-lived objects are built: keep the cycle collector off them (see control_plane/heap.py).
            # No collection first: it would hold the loop (gatehouse/commands/serve.py collects before it starts).
            gc.freeze()
            try:
                while True:
                    await asyncio.sleep(AUDIT_WINDOW)
                    service.flush_audit()
            finally:
                if check_server is not None:
                    await check_server.stop()
                if self.routes is not None:
                    await self.routes.stop()
                if admin is not None:
                    await admin.stop()
                await http.stop()
                await serving.stop(grace=1.0)
                if spans is not None:
                    await spans.stop()
                if self.mirror is not None:
                    await self.mirror.stop()
                for keys in self.keys:
                    with contextlib.suppress(Exception):
                        await keys.close()
