"""The token-age step, right after the credential: a route's ``maxTokenAge`` refuses a
token issued (``iat``) longer ago, or carrying no ``iat``, with 401 ``token_too_old``
(sign in again). Like the credential's, the denial keeps the limit hits counted before it."""

from __future__ import annotations

from collections.abc import Callable

from ext_authz import metrics
from ext_authz.check.steps import Call, CheckParts
from ext_authz.denial_audit import DenialAudit
from ext_authz.errors import TokenError
from ext_authz.responses import denial_parts
from ext_authz.service import Authorizer
from ext_authz.tokens.verifier import VerifiedToken
from servicekit.http1_server import response
from servicekit.protos.gatehouse.policy.v1 import policy_pb2


class TokenAge:
    gives_back = False

    def __init__(self, route: str, max_age: float, audit: DenialAudit, clock: Callable[[], float]) -> None:
        self._route = route
        self._max_age = max_age
        self._audit = audit
        self._clock = clock

    @classmethod
    def for_route(cls, policy: policy_pb2.RoutePolicy, parts: CheckParts) -> TokenAge | None:
        if policy.auth.public or not policy.auth.max_token_age_ms:
            return None
        audit = parts.need(DenialAudit, "has no denial audit")
        return cls(policy.route, policy.auth.max_token_age_ms / 1000, audit, parts.need(Authorizer, "has no authorizer").now)

    async def run(self, call: Call) -> bytes | None:
        token = call.token
        if not isinstance(token, VerifiedToken):
            return None  # the schema gives such a route no API keys
        issued = token.claims.get("iat")
        if isinstance(issued, (int, float)) and not isinstance(issued, bool) and self._clock() - issued <= self._max_age:
            return None
        error = TokenError("token_too_old", "this route needs a token issued more recently; sign in again")
        error.subject, error.jti = token.subject, token.jti
        metrics.DECISIONS.labels("deny", error.reason).inc()
        self._audit.denied(error, self._route, call.request_id)
        status, lines, body = denial_parts(error, call.request_id)
        return response(status, lines, body)
