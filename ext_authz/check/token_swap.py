"""The token-swap step, last: the upstream gets its own ``authorization`` in place of the
client's (``swap/tokens.py`` makes it). None to be had is a 424 the gateway turns into 503
``upstream_token_unavailable``; a token without a subject to sign for is 403. Either way
the request used nothing: its limits' hits go back."""

from __future__ import annotations

from ext_authz import metrics
from ext_authz.check.steps import Call, CheckParts, Refused
from ext_authz.denial_audit import DenialAudit
from ext_authz.errors import AuthzError
from ext_authz.responses import denial_parts
from ext_authz.swap.tokens import SwapRule, UpstreamTokens, UpstreamTokenUnavailable, swap_refusal, swap_rule, unavailable_parts
from ext_authz.tokens.verifier import VerifiedToken
from servicekit.http1_server import response
from servicekit.protos.gatehouse.policy.v1 import policy_pb2


class TokenSwapStep:
    gives_back = True

    def __init__(self, route: str, rule: SwapRule, tokens: UpstreamTokens, audit: DenialAudit) -> None:
        self._route = route
        self._rule = rule
        self._tokens = tokens
        self._audit = audit

    @classmethod
    def for_route(cls, policy: policy_pb2.RoutePolicy, parts: CheckParts) -> TokenSwapStep | None:
        rule = swap_rule(policy)
        if rule is None:
            return None
        tokens = parts.get(UpstreamTokens)
        reason = swap_refusal(policy, tokens)
        if reason is not None:
            raise Refused(reason)
        assert tokens is not None  # swap_refusal refuses a process without them
        return cls(policy.route, rule, tokens, parts.need(DenialAudit, "has no denial audit"))

    async def run(self, call: Call) -> bytes | None:
        token = call.token
        assert isinstance(token, VerifiedToken)  # the schema gives swap routes a token, never an API key
        line = self._tokens.cached(self._rule, token.token_hash)
        if line is None:
            try:
                client_token = call.request.headers.get("authorization", "").partition(" ")[2].strip()
                line = await self._tokens.line(self._rule, token.token_hash, token.subject or "", token.expires_at, client_token)
            except AuthzError as exc:
                return self._denied(exc, token, call.request_id)
        call.upstream_token = line
        return None

    def _denied(self, exc: AuthzError, token: VerifiedToken, request_id: str) -> bytes:
        if isinstance(exc, UpstreamTokenUnavailable):
            metrics.DECISIONS.labels("deny", exc.error).inc()
            status, lines, body = unavailable_parts(exc, request_id)
            return response(status, lines, body)
        metrics.DECISIONS.labels("deny", exc.reason).inc()
        exc.subject, exc.jti = token.subject, token.jti
        self._audit.denied(exc, self._route, request_id)
        status, lines, body = denial_parts(exc, request_id)
        return response(status, lines, body)
