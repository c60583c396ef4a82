"""The credential step: the token (or, on a route that takes them, an API key) decides who
calls, and the identity headers the upstream gets.

A denial is 401/403 with ``WWW-Authenticate`` and the JSON body the gRPC transport sends;
the limit hits counted before it stay counted (a client guessing credentials spends its
quota). The identity lines depend only on the token: rendered once per token, then reused.
A mapped header no claim filled is named in ``x-envoy-auth-headers-to-remove``, so a
client's copy never passes as ours.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from ext_authz import metrics
from ext_authz.check.api_keys import KEYS_WITHOUT_STORE, ApiKeyCheck, KeyRule, denial_for, key_rule
from ext_authz.check.steps import Call, CheckParts, Refused, header_lines
from ext_authz.denial_audit import DenialAudit
from ext_authz.errors import AuthzError
from ext_authz.responses import denial_parts
from ext_authz.service import RESPONSE_CACHE_SIZE, Authorizer
from servicekit.check_contract import HEADERS_TO_REMOVE, PRINCIPAL_HEADER
from servicekit.http1_server import response
from servicekit.protos.gatehouse.policy.v1 import policy_pb2


class Credential:
    gives_back = False

    def __init__(
        self, route: str, requirements: Mapping[str, str], keys: KeyRule | None, parts: CheckParts, issuers: frozenset[str] | None = None
    ) -> None:
        self._route = route
        self._requirements = requirements
        self._issuers = issuers
        """The route's ``auth.issuers``; None: every issuer this service trusts."""
        self._key_rule = keys
        self._authorizer = parts.need(Authorizer, "has no authorizer")
        self._keys = parts.get(ApiKeyCheck)
        self._audit = parts.need(DenialAudit, "has no denial audit")
        self._identities = parts.identities

    @classmethod
    def for_route(cls, policy: policy_pb2.RoutePolicy, parts: CheckParts) -> Credential | None:
        if policy.auth.public:
            return None
        rule = key_rule(policy.auth)
        if rule is not None:
            parts.need(ApiKeyCheck, KEYS_WITHOUT_STORE)
        requirements = {"route": policy.route}
        for name in ("audiences", "scopes", "roles"):
            values = list(getattr(policy.auth, name))
            if values:
                requirements[name] = " ".join(values)
        return cls(policy.route, requirements, rule, parts, route_issuers(policy.auth, parts))

    async def run(self, call: Call) -> bytes | None:
        try:
            identity, token = await self._decide(call.request.headers)
        except AuthzError as exc:
            metrics.DECISIONS.labels("deny", exc.reason).inc()
            self._audit.denied(exc, self._route, call.request_id)
            rule = self._key_rule
            status, lines, body = denial_for(rule, exc, call.request_id) if rule else denial_parts(exc, call.request_id)
            return response(status, lines, body)
        call.token = token
        call.user = identity.get(PRINCIPAL_HEADER)
        call.identity = self._lines(token.token_hash, token.issuer, identity)
        return None

    async def _decide(self, headers: Mapping[str, str]) -> tuple[dict[str, str], Any]:
        """An API key where the route takes one and the request sends one (or the route
        takes nothing else), else the token."""
        rule = self._key_rule
        if rule is not None and ApiKeyCheck.applies(rule, headers):
            assert self._keys is not None  # for_route refuses keys without a store
            return self._keys.decide(rule, headers, time.time())
        return await self._authorizer.decide(headers, self._requirements, self._issuers)

    def _lines(self, token_hash: bytes, issuer: str, identity: dict[str, str]) -> bytes:
        key = (token_hash, issuer)
        lines = self._identities.get(key)
        if lines is None:
            if len(self._identities) >= RESPONSE_CACHE_SIZE:
                self._identities.clear()
            unfilled = sorted(self._authorizer.claim_header_names - identity.keys())
            remove = [(HEADERS_TO_REMOVE, ", ".join(unfilled))] if unfilled else []
            lines = self._identities[key] = header_lines([*identity.items(), *remove])
        return lines


def route_issuers(auth: policy_pb2.AuthRequirements, parts: CheckParts) -> frozenset[str] | None:
    """The issuers a route accepts, as a set the check looks a token's issuer up in; None:
    all. Refused when it names one this service does not trust: none of its tokens could
    pass, and the route's status should say so rather than answer every caller 401."""
    if not auth.issuers:
        return None
    named = frozenset(auth.issuers)
    trusted = parts.need(Authorizer, "has no authorizer").issuer_names
    unknown = sorted(named - trusted)
    if unknown:
        names = ", ".join(repr(name[:200]) for name in unknown[:5])
        raise Refused(f"auth.issuers: not an issuer this authorization service trusts (its issuers): {names}")
    return named
