"""The revocation admin API: ``gatehouse.admin.v1.RevocationAdmin`` over grpc.aio.

Every call must carry ``authorization: Bearer <credential>`` metadata (exactly one). The
credential is compared by SHA-256 digest with ``hmac.compare_digest``; anything else is
answered UNAUTHENTICATED with a fixed message that never echoes what was sent. Each call
emits an ``admin.call`` audit event (with its outcome, also for refused callers) and,
when it changed something, ``revocation.revoked`` / ``revocation.blocked`` /
``revocation.unblocked``.

Errors: INVALID_ARGUMENT names the field and the rule (never the value); UNAVAILABLE
means Redis could not be written or read (nothing was changed, or the change is unknown:
retrying is safe, every write is idempotent).

The server also answers the standard health (grpc.health.v1, SERVING while it is up) and
reflection services; those two need no credential, since probes carry none and neither
reveals nor changes a revocation.

The server is plain gRPC: bind it to loopback or a private network.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import grpc

from ext_authz.admin.inputs import printable, validate_reason
from ext_authz.error_mapping import credential_file_errors
from ext_authz.errors import CredentialError as CredentialError  # re-exported: the CLI imports it from here
from ext_authz.errors import InvalidEntry, StoreUnavailable
from ext_authz.revocation.mirror import RevocationMirror
from ext_authz.revocation.entries import Entry, Kind
from servicekit.audit import (
    ADMIN_CALL,
    REVOCATION_BLOCKED,
    REVOCATION_REVOKED,
    REVOCATION_UNBLOCKED,
    AuditEvent,
    AuditSink,
    Detail,
)
from servicekit.grpc_serving import PUBLIC_SERVICES, GrpcServing, always_ready, service_full_name
from servicekit.protos.gatehouse.admin.v1 import revocation_pb2 as pb
from servicekit.protos.gatehouse.admin.v1 import revocation_pb2_grpc

OPERATOR_HEADER = "x-gatehouse-operator"
"""Optional metadata: who runs the client (self-declared, recorded in the audit trail)."""
MIN_CREDENTIAL_CHARS = 16
DEFAULT_LIST_LIMIT = 1000
MAX_LIST_LIMIT = 10_000
_UNAUTHENTICATED = "a valid admin credential is required"
_KINDS: dict[Kind, pb.EntryKind] = {"jti": pb.ENTRY_KIND_REVOKED_JTI, "sub": pb.ENTRY_KIND_BLOCKED_SUBJECT}
SERVICE_NAME = service_full_name(pb.DESCRIPTOR, "RevocationAdmin")


def check_credential(credential: str, origin: str = "the admin credential") -> str:
    if len(credential) < MIN_CREDENTIAL_CHARS:
        raise CredentialError(origin, f"must be at least {MIN_CREDENTIAL_CHARS} characters")
    if not all(33 <= ord(c) < 127 for c in credential):
        raise CredentialError(origin, "must be printable ASCII without spaces")
    return credential


def read_credential(path: Path) -> str:
    """The credential in ``path`` (surrounding whitespace ignored); CredentialError if unusable."""
    with credential_file_errors(path):
        text = path.read_text(encoding="utf-8")
    return check_credential(text.strip(), str(path))


class _Caller:
    """Who called, as far as the audit trail may say."""

    def __init__(self, context: Any) -> None:
        self.peer: str = str(context.peer())
        self.operator: str | None = None
        for key, value in context.invocation_metadata() or ():
            if key == OPERATOR_HEADER and isinstance(value, str) and printable(value, 64):
                self.operator = value

    def details(self, method: str, outcome: str) -> dict[str, Detail]:
        return {"method": method, "outcome": outcome, "peer": self.peer, "operator": self.operator}


class _CredentialInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Guards every RevocationAdmin method: none runs without the credential."""

    def __init__(self, credential: str, audit: AuditSink) -> None:
        self._digest = hashlib.sha256(credential.encode()).digest()
        self._audit = audit

    def authorized(self, metadata: Sequence[tuple[str, Any]] | None) -> bool:
        values = [value for key, value in metadata or () if key == "authorization"]
        if len(values) != 1 or not isinstance(values[0], str):
            return False
        scheme, _, sent = values[0].partition(" ")
        if scheme.lower() != "bearer":
            return False
        digest = hashlib.sha256(sent.strip().encode("utf-8", "replace")).digest()
        return hmac.compare_digest(digest, self._digest)

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], handler_call_details: Any
    ) -> Any:
        service = str(handler_call_details.method).lstrip("/").partition("/")[0]
        if service in PUBLIC_SERVICES:
            return await continuation(handler_call_details)
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return None  # UNIMPLEMENTED: every RevocationAdmin method is unary
        inner = handler.unary_unary
        method = str(handler_call_details.method).rpartition("/")[2]

        async def guarded(request: Any, context: Any) -> Any:
            if not self.authorized(context.invocation_metadata()):
                caller = _Caller(context)
                self._audit.emit(
                    AuditEvent(
                        kind=ADMIN_CALL,
                        actor="unauthenticated",
                        reason="missing or wrong admin credential",
                        details=caller.details(method, "unauthenticated"),
                    )
                )
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, _UNAUTHENTICATED)
            return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(
            guarded,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


class RevocationAdminService(revocation_pb2_grpc.RevocationAdminServicer):
    """The four calls; authentication happened before any of them runs."""

    def __init__(self, mirror: RevocationMirror, audit: AuditSink) -> None:
        self._mirror = mirror
        self._audit = audit

    async def Revoke(self, request: pb.RevokeRequest, context: Any) -> pb.RevokeResponse:  # noqa: N802
        caller = _Caller(context)
        reason = await self._reason(request.reason, "Revoke", caller, context)
        try:
            entry = await self._mirror.revoke(request.jti, float(request.expires_at))
        except (InvalidEntry, StoreUnavailable) as exc:
            await self._refuse(exc, "Revoke", caller, context)
            raise
        self._called("Revoke", caller)
        self._emit(REVOCATION_REVOKED, caller, reason, jti=entry.value, expires_at=entry.expires_at)
        return pb.RevokeResponse(entry=_entry_message(entry))

    async def Block(self, request: pb.BlockRequest, context: Any) -> pb.BlockResponse:  # noqa: N802
        caller = _Caller(context)
        reason = await self._reason(request.reason, "Block", caller, context)
        until = float(request.until) if request.HasField("until") else None
        try:
            entry = await self._mirror.block(request.subject, until)
        except (InvalidEntry, StoreUnavailable) as exc:
            await self._refuse(exc, "Block", caller, context)
            raise
        self._called("Block", caller)
        self._emit(REVOCATION_BLOCKED, caller, reason, subject=entry.value, until=entry.expires_at)
        return pb.BlockResponse(entry=_entry_message(entry))

    async def Unblock(self, request: pb.UnblockRequest, context: Any) -> pb.UnblockResponse:  # noqa: N802
        caller = _Caller(context)
        reason = await self._reason(request.reason, "Unblock", caller, context)
        try:
            existed = await self._mirror.unblock(request.subject)
        except (InvalidEntry, StoreUnavailable) as exc:
            await self._refuse(exc, "Unblock", caller, context)
            raise
        self._called("Unblock", caller)
        self._emit(REVOCATION_UNBLOCKED, caller, reason, subject=request.subject, existed=existed)
        return pb.UnblockResponse(existed=existed)

    async def List(self, request: pb.ListRequest, context: Any) -> pb.ListResponse:  # noqa: N802
        caller = _Caller(context)
        kinds: dict[int, Kind | None] = {
            pb.ENTRY_KIND_UNSPECIFIED: None,
            pb.ENTRY_KIND_REVOKED_JTI: "jti",
            pb.ENTRY_KIND_BLOCKED_SUBJECT: "sub",
        }
        if request.kind not in kinds:
            await self._refuse(InvalidEntry("kind", "unknown entry kind"), "List", caller, context)
        limit = min(request.limit or DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT)
        try:
            entries = await self._mirror.list(kinds[request.kind], limit + 1)
        except StoreUnavailable as exc:
            await self._refuse(exc, "List", caller, context)
            raise
        self._called("List", caller)
        stats = self._mirror.stats()
        return pb.ListResponse(
            entries=[_entry_message(e) for e in entries[:limit]],
            truncated=len(entries) > limit,
            mirror=pb.MirrorStatus(
                state=stats.state,
                synced_at=stats.synced_at or 0.0,
                revoked=stats.revoked,
                blocked=stats.blocked,
                policy=self._mirror.policy,
            ),
        )

    async def _reason(self, reason: str, method: str, caller: _Caller, context: Any) -> str:
        try:
            validate_reason(reason)
        except InvalidEntry as exc:
            await self._refuse(exc, method, caller, context)
        return reason

    async def _refuse(self, exc: Exception, method: str, caller: _Caller, context: Any) -> None:
        """Audit the failed call and abort it (raises)."""
        if isinstance(exc, InvalidEntry):
            code, message, outcome = grpc.StatusCode.INVALID_ARGUMENT, str(exc), "invalid_argument"
        else:
            code, message, outcome = grpc.StatusCode.UNAVAILABLE, "the revocation store (Redis) is unavailable", "unavailable"
        self._audit.emit(AuditEvent(kind=ADMIN_CALL, actor="admin", reason=message, details=caller.details(method, outcome)))
        await context.abort(code, message)

    def _called(self, method: str, caller: _Caller) -> None:
        self._audit.emit(AuditEvent(kind=ADMIN_CALL, actor="admin", details=caller.details(method, "ok")))

    def _emit(
        self,
        kind: str,
        caller: _Caller,
        reason: str,
        *,
        subject: str | None = None,
        jti: str | None = None,
        **details: Detail,
    ) -> None:
        details["operator"] = caller.operator
        self._audit.emit(AuditEvent(kind=kind, actor="admin", subject=subject, jti=jti, reason=reason, details=details))


def _entry_message(entry: Entry) -> pb.Entry:
    message = pb.Entry(kind=_KINDS[entry.kind], value=entry.value)
    if entry.expires_at is not None:
        message.expires_at = int(entry.expires_at)
    return message


class RevocationAdminServer:
    """A built (not yet started) admin server; ``port`` is the bound port."""

    def __init__(self, server: Any, port: int, serving: GrpcServing) -> None:
        self.server = server
        self.port = port
        self._serving = serving

    async def start(self) -> None:
        await self._serving.start()

    async def stop(self, grace: float = 1.0) -> None:
        await self._serving.stop(grace)


def build_admin_server(
    mirror: RevocationMirror, audit: AuditSink, credential: str, address: str, *, reuse_port: bool = False
) -> RevocationAdminServer:
    """The admin gRPC server on ``address`` (``host:port``; port 0 picks one). Call it
    with the event loop running, then ``await server.start()``. ``reuse_port``: the
    workers of one service share the address (any of them can take a call: every change
    goes through Redis, and every worker's mirror follows it).
    """
    check_credential(credential)
    server = grpc.aio.server(
        interceptors=[_CredentialInterceptor(credential, audit)],
        options=[("grpc.so_reuseport", 1 if reuse_port else 0)],
    )
    service = RevocationAdminService(mirror, audit)
    revocation_pb2_grpc.add_RevocationAdminServicer_to_server(service, server)  # type: ignore[no-untyped-call]
    serving = GrpcServing(server, [SERVICE_NAME], always_ready, what="ext_authz_admin")
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise OSError(f"admin API: cannot listen on {address}: {exc}") from None
    if port == 0:
        raise OSError(f"admin API: cannot listen on {address}")
    return RevocationAdminServer(server, port, serving)
