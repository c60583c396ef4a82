"""The authorization check over Envoy's HTTP ext_authz protocol: one call decides the token
and the route's rate limits.

Envoy sends the original request line and the headers it is told to forward; the route
is named by ``x-gatehouse-route``, which Envoy sets per route after removing any copy a
client sent, so a client cannot pick the route whose rules apply. The route's
requirements and limits come from the control plane over xDS (``RoutePolicy`` with
``auth``), not from the request.

Order, per request:

1. limits whose key does not depend on who calls (``ip``, ``apiKey``, ``header:<name>``):
   counted before the token is looked at, so a client guessing tokens is limited too;
2. the token (servicekit-independent decision in ``Authorizer``: verification, cached;
   revocation mirror; the route's audiences, scopes and roles): 401 or 403 on failure;
   the hits of step 1 stay counted;
3. ``user`` limits, keyed on the verified subject; a denial here gives step 1's hits back
   (a denied request uses nothing), as the RateLimitService does.

A public route's policy (``auth.public``, through the second, fail-open ext_authz filter)
stops after step 1: no token is read, no identity returned, ``user`` limits never apply.

4. a route with ``validation`` (``request_validation``): its headers, query and body, last,
   so a caller denied its token or its quota learns nothing about the rules; a failure is
   400 ``invalid_request`` naming the field and the rule (on a public route, after step 1).

A route with a waiting room meets it after that, once everything else passed
(``waiting_room``): a request it does not admit gives its limits' hits back. A swap
route's upstream token comes last.

A route with ``api_keys`` takes an API key in place of the token in step 2 (``api_keys``):
its consumer is the identity (``x-user-id``, ``x-consumer``) step 3 counts by.

Answers: 200 with the identity headers (Envoy passes them upstream through
``allowed_upstream_headers``) and ``X-RateLimit-*`` of the binding limit (to the client
through ``allowed_client_headers_on_success``); 401/403 with ``WWW-Authenticate`` and the
JSON body the gRPC transport sends; 429 with ``X-RateLimit-*``, ``Retry-After`` and the
gateway's ``rate_limited`` JSON body. Counter keys are the ones the RateLimitService
uses, so switching transports keeps every count.

A swap route (``RoutePolicy.upstream_token``) adds the upstream's own ``authorization``
to the 200, in place of the client's (ext_authz/swap/tokens.py); none to be had is a
424 the gateway turns into 503 ``upstream_token_unavailable``, its limits' hits given back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from structlog.contextvars import bind_contextvars, reset_contextvars

from ext_authz import metrics
from ext_authz.check.api_keys import KEYS_WITHOUT_STORE, ApiKeyCheck, KeyRule, denial_for, key_rule
from ext_authz.denial_audit import DenialAudit
from ext_authz.tokens.verifier import VerifiedToken
from ext_authz.errors import AuthzError, UnavailableError
from ext_authz.check.validation import Compiler, Invalid, RequestRules
from ext_authz.responses import denial_parts
from ext_authz.check.waiting_room import RoomPolicy, WaitingRoomGate, room_policy
from ext_authz.check.waiting_room import Verdict as RoomVerdict
from ext_authz.swap.tokens import (
    SwapRule,
    UpstreamTokens,
    UpstreamTokenUnavailable,
    swap_refusal,
    swap_rule,
    unavailable_parts,
)
from ext_authz.service import MAX_LOGGED_REQUEST_ID, REQUEST_ID_HEADER, RESPONSE_CACHE_SIZE, USER_ID_HEADER, Authorizer
from limiter.config import Policies
from limiter.engine import Limiter
from limiter.model import LimitSpec
from limiter.policies import PartlyApplied, PolicySource, descriptor_key, limit_spec
from limiter.verdict import Verdict, decide, merge, rate_limit_headers, refund
from servicekit.http1_server import Request, response
from servicekit.protos.gatehouse.ratelimit.v1 import policy_pb2
from servicekit.span_export import SpanExporter
from servicekit.trace_context import TRACEPARENT

log = structlog.get_logger(component="ext_authz")

ROUTE_HEADER = "x-gatehouse-route"
FORWARDED_FOR = "x-forwarded-for"
API_KEY_HEADER = "x-api-key"
HEADERS_TO_REMOVE = "x-envoy-auth-headers-to-remove"
RATE_LIMITED_BODY = {"code": "rate_limited", "message": "Too many requests; retry later."}
"""The body of the gateway's own 429 (control_plane/translator/local_replies.py), so a
client sees one shape whichever path limited it."""


@dataclass(frozen=True, slots=True)
class RouteLimit:
    spec: LimitSpec
    key: str
    """The policy key: ``user``, ``ip``, ``apiKey`` or ``header:<name>``."""


@dataclass(frozen=True, slots=True)
class RouteCheck:
    route: str
    requirements: Mapping[str, str]
    """audiences/scopes/roles, space-separated, as ``check_requirements`` reads them."""
    before_auth: tuple[RouteLimit, ...]
    after_auth: tuple[RouteLimit, ...]
    public: bool = False
    """No token: the call decides the route's limits only (``AuthRequirements.public``)."""
    room: RoomPolicy | None = None
    keys: KeyRule | None = None
    """API keys too, or only (``AuthRequirements.api_keys``; ``api_keys``)."""
    upstream_token: SwapRule | None = None
    """Token swap (``RoutePolicy.upstream_token``): the upstream gets its own token."""
    validation: RequestRules | None = None


def route_check(policy: policy_pb2.RoutePolicy, compiler: Compiler | None = None) -> RouteCheck:
    """One route's check from its policy; ValueError if a limit or a validation rule is unusable."""
    requirements = {"route": policy.route}
    for name in ("audiences", "scopes", "roles"):
        values = list(getattr(policy.auth, name))
        if values:
            requirements[name] = " ".join(values)
    limits = [RouteLimit(limit_spec(limit), limit.key) for limit in policy.limits]
    return RouteCheck(
        route=policy.route,
        requirements=requirements,
        before_auth=tuple(limit for limit in limits if limit.key != "user"),
        after_auth=tuple(limit for limit in limits if limit.key == "user"),
        public=policy.auth.public,
        room=room_policy(policy.route, policy.waiting_room) if policy.HasField("waiting_room") else None,
        keys=key_rule(policy.auth),
        upstream_token=swap_rule(policy),
        validation=(compiler or Compiler()).rules(policy.route, policy.validation) if policy.HasField("validation") else None,
    )


Refusal = Callable[[policy_pb2.RoutePolicy], "str | None"]
"""Why this process cannot serve a route's policy (None: it can)."""


class RouteTable:
    """The routes whose checks come here: replaced whole on each policy update, but for the
    routes this process refuses, which it answers 503 until their rules change (fail
    closed: the rules they asked for are not enforced here)."""

    def __init__(self) -> None:
        self.routes: Mapping[str, RouteCheck] = {}
        self.refused: Mapping[str, str] = {}
        self._compiler = Compiler()

    def replace(self, policies: Iterable[policy_pb2.RoutePolicy], refusal: Refusal | None = None) -> dict[str, str]:
        """Take every policy ``refusal`` and compiling admit; the others are refused, each
        with why (returned, and kept in ``refused``): one bad route costs that route only."""
        self._compiler.begin()
        routes: dict[str, RouteCheck] = {}
        refused: dict[str, str] = {}
        for policy in policies:
            if not policy.HasField("auth"):
                continue
            why = refusal(policy) if refusal is not None else None
            if why is None:
                try:
                    routes[policy.route] = route_check(policy, self._compiler)
                    continue
                except ValueError as exc:
                    why = str(exc)
            refused[policy.route] = why
        self._compiler.done()
        self.routes, self.refused = routes, refused
        return refused


class RouteSubscription:
    """The table's feed (the control plane's ADS, type RoutePolicy) and the limiter the
    checks decide with. A route this process cannot honour (limits, but no
    ``http.rateLimit``; a waiting room without its ticket key; API keys without a key
    store; token swap it may not do; a limit or a rule the engine refuses) is refused
    alone: the update is applied for every other route and NACKed naming it
    (``PartlyApplied``), so the control plane reports it on that route's status."""

    def __init__(
        self,
        table: RouteTable,
        policies: Policies,
        limiter: Limiter | None,
        *,
        rooms: bool = False,
        upstream_tokens: UpstreamTokens | None = None,
        keys: bool = False,
    ) -> None:
        self._table = table
        self.limiter = limiter
        self._rooms = rooms
        self._keys = keys
        self._upstream_tokens = upstream_tokens
        self._source = PolicySource(
            policies.xds.address, node_id=policies.xds.node_id, cluster=policies.xds.cluster, on_update=self._apply
        )
        self._task: asyncio.Task[None] | None = None

    @property
    def synced(self) -> bool:
        return self._source.synced.is_set()

    def _apply(self, policies: list[policy_pb2.RoutePolicy]) -> None:
        refused = self._table.replace(policies, self._refusal)
        if refused:
            raise PartlyApplied(refused)

    def _refusal(self, policy: policy_pb2.RoutePolicy) -> str | None:
        if self.limiter is None and policy.limits:
            return "has rate limits for this call, and ext_authz has no http.rateLimit"
        if not self._rooms and policy.HasField("waiting_room"):
            return "has a waiting room, and ext_authz has no http.waitingRoom (and http.rateLimit)"
        if not self._keys and policy.auth.api_keys:
            return KEYS_WITHOUT_STORE
        return swap_refusal(policy, self._upstream_tokens)

    def start(self) -> None:
        self._task = asyncio.create_task(self._source.run(), name="route-policies")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.limiter is not None:
            await self.limiter.close()  # hybrid: unused reserved tokens go back


def _client_address(headers: Mapping[str, str]) -> str | None:
    """The peer Envoy saw: it appends it to x-forwarded-for (use_remote_address), last."""
    forwarded = headers.get(FORWARDED_FOR)
    if not forwarded:
        return None
    return forwarded.rpartition(",")[2].strip() or None


def _key_value(limit: RouteLimit, headers: Mapping[str, str], user: str | None) -> str | None:
    if limit.key == "ip":
        return _client_address(headers)
    if limit.key == "user":
        return user
    if limit.key == "apiKey":
        return headers.get(API_KEY_HEADER)
    return headers.get(limit.key.removeprefix("header:").lower())


def _counter_keys(limits: tuple[RouteLimit, ...], headers: Mapping[str, str], user: str | None) -> list[tuple[LimitSpec, str]]:
    """(spec, counter key) for each limit whose key the request carries, as the
    RateLimitService forms them from Envoy's descriptors."""
    found = []
    for limit in limits:
        value = _key_value(limit, headers, user)
        if value:
            found.append((limit.spec, f"{descriptor_key(limit.key)}={value}"))
    return found


def _header_lines(headers: Iterable[tuple[str, str]]) -> bytes:
    return b"".join(f"{name}: {value}\r\n".encode("latin-1") for name, value in headers)


class HttpCheck:
    """The handler ``servicekit.http1_server.Http1Server`` calls for every check."""

    def __init__(
        self,
        authorizer: Authorizer,
        table: RouteTable,
        limiter: Limiter | None,
        audit: DenialAudit,
        *,
        on_unknown_route: Callable[[str], None] | None = None,
        spans: SpanExporter | None = None,
        rooms: WaitingRoomGate | None = None,
        keys: ApiKeyCheck | None = None,
        upstream_tokens: UpstreamTokens | None = None,
    ) -> None:
        self._rooms = rooms
        self._keys = keys
        self._authorizer = authorizer
        self._table = table
        self._limiter = limiter
        self._audit = audit
        self._allowed = metrics.DECISIONS.labels("allow", "ok")
        self._public = metrics.DECISIONS.labels("allow", "public")
        self._identity: dict[tuple[bytes, str], bytes] = {}
        self._unknown_logged: set[str] = set()
        self._on_unknown_route = on_unknown_route
        self._spans = spans
        self._upstream_tokens = upstream_tokens

    async def __call__(self, request: Request) -> bytes:
        headers = request.headers
        request_id = headers.get(REQUEST_ID_HEADER, "")[:MAX_LOGGED_REQUEST_ID]
        bound = bind_contextvars(request_id=request_id)
        try:
            if self._spans is None:
                return await self._check(request, request_id)
            start = time.time_ns()
            answer = await self._check(request, request_id)
            self._span(self._spans, headers, answer, start)
            return answer
        finally:
            reset_contextvars(**bound)

    @staticmethod
    def _span(spans: SpanExporter, headers: Mapping[str, str], answer: bytes, start: int) -> None:
        """The check as a child of Envoy's span for this call (its ``traceparent``)."""
        status = int(answer[9:12])
        spans.record(
            headers.get(TRACEPARENT), "ext_authz check", start, time.time_ns(),
            (("gatehouse.route", headers.get(ROUTE_HEADER, "")), ("gatehouse.decision", "allow" if status == 200 else "deny"),
             ("http.response.status_code", status)),
            error=status >= 500,
        )

    async def _check(self, request: Request, request_id: str) -> bytes:
        headers = request.headers
        route_id = headers.get(ROUTE_HEADER, "")
        route = self._table.routes.get(route_id)
        if route is None:
            return self._refused_route(route_id, request_id) if route_id in self._table.refused else self._unknown_route(route_id, request_id)
        first = await self._limits(route.before_auth, headers, None)
        if first is not None and first.denied:
            return self._too_many(first, request_id)
        if route.public:
            # No identity to send: a public route's `user` limits never apply (as with
            # ratelimit_svc, whose descriptor needs the x-user-id a token would have set).
            extra = b""
            if route.validation is not None or route.room is not None:
                stop, extra = await self._gate(route, request, request_id, first, None)
                if stop is not None:
                    return stop
            self._public.inc()
            limits = _header_lines(rate_limit_headers(first.binding, denied=False)) if first and first.binding else b""
            return b"HTTP/1.1 200 OK\r\n" + limits + extra + b"content-length: 0\r\n\r\n"
        try:
            identity, token = await self._decide(route, headers)
        except AuthzError as exc:
            metrics.DECISIONS.labels("deny", exc.reason).inc()
            self._audit.denied(exc, route.route, request_id)
            status, lines, body = denial_for(route.keys, exc, request_id) if route.keys else denial_parts(exc, request_id)
            return response(status, lines, body)
        second = await self._limits(route.after_auth, headers, identity.get(USER_ID_HEADER))
        if second is not None and second.denied:
            if first is not None and self._limiter is not None:
                await refund(self._limiter, first)
            return self._too_many(second, request_id)
        extra = b""
        if route.validation is not None or route.room is not None:
            stop, extra = await self._gate(route, request, request_id, first, second)
            if stop is not None:
                return stop
        swap = b""
        if route.upstream_token is not None:
            try:
                swap = self._swap_cached(route.upstream_token, token) or await self._swap(route.upstream_token, token, headers)
            except AuthzError as exc:
                # No token for the upstream: the request uses nothing (its hits go back).
                for verdict in (first, second):
                    if verdict is not None and self._limiter is not None:
                        await refund(self._limiter, verdict)
                if isinstance(exc, UpstreamTokenUnavailable):
                    metrics.DECISIONS.labels("deny", exc.error).inc()
                    status, lines, body = unavailable_parts(exc, request_id)
                    return response(status, lines, body)
                metrics.DECISIONS.labels("deny", exc.reason).inc()
                exc.subject, exc.jti = token.subject, token.jti
                self._audit.denied(exc, route.route, request_id)
                status, lines, body = denial_parts(exc, request_id)
                return response(status, lines, body)
        self._allowed.inc()
        verdict = merge(first, second)
        limits = _header_lines(rate_limit_headers(verdict.binding, denied=False)) if verdict and verdict.binding else b""
        identity_lines = self._identity_lines(token.token_hash, token.issuer, identity)
        return b"HTTP/1.1 200 OK\r\n" + identity_lines + swap + limits + extra + b"content-length: 0\r\n\r\n"

    async def _decide(self, route: RouteCheck, headers: Mapping[str, str]) -> tuple[dict[str, str], Any]:
        """An API key where the route takes one and the request sends one (or the route
        takes nothing else: ``api_keys``), else the token."""
        if route.keys is not None and ApiKeyCheck.applies(route.keys, headers):
            assert self._keys is not None  # RouteSubscription refuses keys without a store
            return self._keys.decide(route.keys, headers, time.time())
        return await self._authorizer.decide(headers, route.requirements)

    async def _gate(
        self, route: RouteCheck, request: Request, request_id: str, first: Verdict | None, second: Verdict | None
    ) -> tuple[bytes | None, bytes]:
        """Validation, then the waiting room, once the limits and the caller passed: (the
        answer that stops the request, or None; the room's lines for the 200)."""
        if route.validation is not None and (invalid := route.validation.check(request.path, request.headers, request.body)):
            return self._invalid(route, invalid, request_id), b""
        if route.room is None:
            return None, b""
        room = await self._room(route.room, request.headers, request_id, first, second)
        return (None, room.data) if room.admitted else (room.data, b"")

    async def _room(
        self, room: RoomPolicy, headers: Mapping[str, str], request_id: str, first: Verdict | None, second: Verdict | None
    ) -> RoomVerdict:
        """The route's waiting room; a request it does not admit uses none of its limits."""
        assert self._rooms is not None  # RouteSubscription refuses rooms without a gate
        verdict = await self._rooms.check(room, headers, request_id)
        if not verdict.admitted and self._limiter is not None:
            for hits in (first, second):
                if hits is not None:
                    await refund(self._limiter, hits)
        return verdict

    def _swap_cached(self, rule: SwapRule, token: VerifiedToken) -> bytes | None:
        """The warm path, without a coroutine."""
        assert self._upstream_tokens is not None  # the route table was refused otherwise
        return self._upstream_tokens.cached(rule, token.token_hash)

    async def _swap(self, rule: SwapRule, token: VerifiedToken, headers: Mapping[str, str]) -> bytes:
        """The upstream's own ``authorization`` line (ext_authz/swap/tokens.py)."""
        assert self._upstream_tokens is not None  # the route table was refused otherwise
        client_token = headers.get("authorization", "").partition(" ")[2].strip()
        return await self._upstream_tokens.line(rule, token.token_hash, token.subject or "", token.expires_at, client_token)

    async def _limits(self, limits: tuple[RouteLimit, ...], headers: Mapping[str, str], user: str | None) -> Verdict | None:
        if not limits or self._limiter is None:
            return None
        keys = _counter_keys(limits, headers, user)
        return await decide(self._limiter, keys) if keys else None

    def _identity_lines(self, token_hash: bytes, issuer: str, identity: dict[str, str]) -> bytes:
        """Identity headers depend only on the token: rendered once per token, then reused.
        A mapped header no claim filled is removed from the request (Envoy reads
        ``x-envoy-auth-headers-to-remove``), so a client's copy never passes as ours."""
        key = (token_hash, issuer)
        lines = self._identity.get(key)
        if lines is None:
            if len(self._identity) >= RESPONSE_CACHE_SIZE:
                self._identity.clear()
            unfilled = sorted(self._authorizer.claim_header_names - identity.keys())
            remove = [(HEADERS_TO_REMOVE, ", ".join(unfilled))] if unfilled else []
            lines = self._identity[key] = _header_lines([*identity.items(), *remove])
        return lines

    def _too_many(self, verdict: Verdict, request_id: str) -> bytes:
        assert verdict.binding is not None
        body = json.dumps({"error": {**RATE_LIMITED_BODY, "request_id": request_id}}, separators=(",", ":")).encode()
        lines = [("content-type", "application/json"), ("cache-control", "no-store")]
        return response(429, [*lines, *rate_limit_headers(verdict.binding, denied=True)], body)

    def _invalid(self, route: RouteCheck, invalid: Invalid, request_id: str) -> bytes:
        """400 (413) naming the field and the rule; the request still counted against its limits."""
        metrics.DECISIONS.labels("deny", "invalid_request").inc()
        log.info("request_invalid", route=route.route, location=invalid.location, field=invalid.field, rule=invalid.rule)
        return invalid.answer(request_id)

    def _refused_route(self, route_id: str, request_id: str) -> bytes:
        """A route whose rules this process refused (reported on the route's status through
        the NACK): fail closed, never serve it with less than it asked for."""
        error = UnavailableError("route_refused", "the authorization service cannot enforce this route's rules")
        metrics.DECISIONS.labels("deny", error.reason).inc()
        status, lines, body = denial_parts(error, request_id)
        return response(status, lines, body)

    def _unknown_route(self, route_id: str, request_id: str) -> bytes:
        """Envoy named a route the table does not hold (yet): the control plane delivers
        routes to Envoy and here on separate streams. Fail closed, retryable."""
        if route_id not in self._unknown_logged and len(self._unknown_logged) < 1000:
            self._unknown_logged.add(route_id)
            log.warning("authz_route_unknown", route=route_id[:200], detail="not in the route table from the control plane")
        if self._on_unknown_route is not None:
            self._on_unknown_route(route_id)
        error = UnavailableError("unknown_route", "the authorization service does not know this route yet")
        metrics.DECISIONS.labels("deny", error.reason).inc()
        status, lines, body = denial_parts(error, request_id)
        return response(status, lines, body)

