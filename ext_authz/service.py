"""The Authorization service Envoy calls for every request on an authenticated route.

A check is: verify the bearer token (cached for repeats), consult the local revocation
mirror (no Redis round trip), apply the route's requirements, and answer OK with the
identity headers or a JSON denial. Everything on this path is in memory except a JWKS
refetch for an unknown kid, which is rate-limited.

Logs: every line logged while a check runs (an audit line for a denial when audit events go
to the log, ``claims_not_forwarded``...) carries ``request_id``, Envoy's ``x-request-id``,
bound once per check with structlog's contextvars (``servicekit/logs.py`` merges them). No
line carries the token, a claim value other than the subject and jti of a verified token, or
a key: errors name a ``reason`` code and a fixed message.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import grpc
import structlog
from envoy.service.auth.v3 import external_auth_pb2, external_auth_pb2_grpc
from structlog.contextvars import bind_contextvars, reset_contextvars

from ext_authz import metrics
from ext_authz.tokens.claim_headers import claim_headers
from ext_authz.config import Issuer
from ext_authz.errors import AuthzError, TokenError
from ext_authz.tokens.requirements import check_requirements
from ext_authz.responses import allowed, denied
from ext_authz.revocation.mirror import RevocationMirror
from ext_authz.tokens.verifier import TokenVerifier
from ext_authz.denial_audit import DenialAudit
from servicekit.audit import AuditSink
from servicekit.span_export import SpanExporter
from servicekit.trace_context import call_traceparent
from servicekit.check_contract import PRINCIPAL_HEADER
from servicekit.check_contract import USER_ID_HEADER as USER_ID_HEADER
from ext_authz.tokens.principal import token_principal

log = structlog.get_logger(component="ext_authz")

REQUEST_ID_HEADER = "x-request-id"
RESPONSE_CACHE_SIZE = 10_000
MAX_LOGGED_REQUEST_ID = 200
"""A client may send its own x-request-id (Envoy keeps it): logs keep this many characters."""


class Authorizer:
    """The decision, apart from gRPC: headers in, identity headers out (or an AuthzError)."""

    def __init__(
        self,
        verifier: TokenVerifier,
        issuers: Mapping[str, Issuer],
        mirror: RevocationMirror | None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._verifier = verifier
        self._issuers = issuers
        self.claim_header_names = frozenset(name for issuer in issuers.values() for name in issuer.claim_headers) | {PRINCIPAL_HEADER}
        """Every identity header a token may fill: one it filled none of is removed upstream."""
        self._mirror = mirror
        self._clock = clock
        self._identities: dict[tuple[bytes, str], tuple[dict[str, str], list[str]]] = {}

    def now(self) -> float:
        """The clock revocation is judged by; the token-age step reads the same one."""
        return self._clock()

    @property
    def issuer_names(self) -> frozenset[str]:
        """The issuers this service trusts: a route naming another is refused (``credential``)."""
        return frozenset(self._issuers)

    async def decide(
        self, headers: Mapping[str, str], extensions: Mapping[str, str], accepted: frozenset[str] | None = None
    ) -> tuple[dict[str, str], Any]:
        """``accepted``: the route's ``auth.issuers`` (the HTTP check parses them once per
        route table); None reads them from ``extensions`` (gRPC), where absent means all."""
        token = await self._verifier.verify(headers.get("authorization"))
        if accepted is None:
            accepted = accepted_issuers(extensions)
        try:
            if accepted is not None and token.issuer not in accepted:
                raise TokenError("issuer_not_accepted", "this route does not accept tokens of the token's issuer")
            if self._mirror is not None:
                self._mirror.enforce(token.jti, token.subject or "", self._clock())
            check_requirements(token.claims, extensions)
        except AuthzError as exc:
            exc.subject, exc.jti = token.subject, token.jti
            raise
        issuer = self._issuers[token.issuer]
        # The headers depend only on the token: mapped once per token (8 of a warm check's
        # 25 µs went here), then shared; callers never change the dict.
        key = (token.token_hash, token.issuer)
        cached = self._identities.get(key)
        if cached is None:
            if len(self._identities) >= RESPONSE_CACHE_SIZE:
                self._identities.clear()
            cached = self._identities[key] = with_principal(token.issuer, *claim_headers(token.claims, issuer.claim_headers))
        identity, dropped = cached
        if dropped:
            log.warning("claims_not_forwarded", issuer=token.issuer, claims=dropped, reason="unsafe value")
            if issuer.claim_headers.get(USER_ID_HEADER) in dropped:
                error = TokenError("unsafe_claim", "the token's user id cannot be forwarded safely")
                error.subject, error.jti = None, token.jti
                raise error
        return identity, token


def accepted_issuers(extensions: Mapping[str, str]) -> frozenset[str] | None:
    """A route's ``auth.issuers`` from its context extensions (space-separated); None: any."""
    names = extensions.get("issuers")
    return frozenset(names.split()) if names else None


def with_principal(issuer: str, identity: dict[str, str], dropped: list[str]) -> tuple[dict[str, str], list[str]]:
    """The claim headers and, when the user id was forwarded, the caller's principal: the id
    qualified by its issuer (``PRINCIPAL_HEADER``)."""
    user_id = identity.get(USER_ID_HEADER)
    if user_id is not None:
        identity[PRINCIPAL_HEADER] = token_principal(issuer, user_id)
    return identity, dropped


class AuthorizationService(external_auth_pb2_grpc.AuthorizationServicer):  # type: ignore[misc]
    def __init__(self, authorizer: Authorizer, audit: AuditSink | DenialAudit, *, spans: SpanExporter | None = None) -> None:
        self._authorizer = authorizer
        self._audit = audit if isinstance(audit, DenialAudit) else DenialAudit(audit)
        self._allowed = metrics.DECISIONS.labels("allow", "ok")
        self._responses: dict[tuple[bytes, str], external_auth_pb2.CheckResponse] = {}
        self._spans = spans

    async def Check(  # noqa: N802 - gRPC method name
        self, request: external_auth_pb2.CheckRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> external_auth_pb2.CheckResponse:
        if self._spans is None:
            return await self._check(request)
        start = time.time_ns()
        response = await self._check(request)
        allowed = response.status.code == 0
        self._spans.record(
            call_traceparent(context), "ext_authz check", start, time.time_ns(),
            (("gatehouse.route", request.attributes.context_extensions.get("route", "")),
             ("gatehouse.decision", "allow" if allowed else "deny"), ("rpc.grpc.status_code", 0)),
            error=response.status.code == 14,
        )
        return response

    async def _check(self, request: external_auth_pb2.CheckRequest) -> external_auth_pb2.CheckResponse:
        attributes = request.attributes
        headers = attributes.request.http.headers
        request_id = headers.get(REQUEST_ID_HEADER, "")
        # This task's context only (grpc.aio runs each RPC in its own task); reset all the same.
        bound = bind_contextvars(request_id=request_id[:MAX_LOGGED_REQUEST_ID])
        try:
            try:
                identity, token = await self._authorizer.decide(headers, attributes.context_extensions)
            except AuthzError as exc:
                metrics.DECISIONS.labels("deny", exc.reason).inc()
                self._audit.denied(exc, attributes.context_extensions.get("route", ""), request_id[:MAX_LOGGED_REQUEST_ID])
                return denied(exc, request_id)
            self._allowed.inc()
            return self._allowed_response(token.token_hash, token.issuer, identity)
        finally:
            reset_contextvars(**bound)

    def _allowed_response(self, token_hash: bytes, issuer: str, identity: dict[str, str]) -> external_auth_pb2.CheckResponse:
        """OK responses depend only on the token: built once per token, then reused."""
        key = (token_hash, issuer)
        response = self._responses.get(key)
        if response is None:
            if len(self._responses) >= RESPONSE_CACHE_SIZE:
                self._responses.clear()
            response = allowed(identity, sorted(self._authorizer.claim_header_names - identity.keys()))
            self._responses[key] = response
        return response

    @property
    def denial_audit(self) -> DenialAudit:
        """Shared with the HTTP transport, so one flush covers both."""
        return self._audit

    def flush_audit(self) -> None:
        self._audit.flush()
