"""The authorization check over Envoy's HTTP ext_authz protocol: one call decides the token
and the route's rate limits.

Envoy sends the original request line and the headers it is told to forward; the route
is named by ``x-gatehouse-route``, which Envoy sets per route after removing any copy a
client sent, so a client cannot pick the route whose rules apply. The route's
requirements and limits come from the control plane over xDS (``RoutePolicy`` with
``auth``), not from the request.

Per request, the route's steps run in order (``route_table.STEP_ORDER``; each step's
module says what it decides and whether its denial gives back the limit hits counted
before it): limits that do not depend on the caller (``steps``), the credential, a token
or an API key (``credential``), the token's age (``token_age``), ``user`` limits,
validation (``validation``), the waiting room (``waiting_room``), token swap
(``token_swap``). A public route's policy
(``auth.public``) has no credential step: no token is read, no identity returned, ``user``
limits never apply.

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

import time
from collections.abc import Callable, Mapping

import structlog
from structlog.contextvars import bind_contextvars, reset_contextvars

from ext_authz import metrics
from ext_authz.check.route_table import RouteTable
from ext_authz.check.steps import Call, header_lines
from ext_authz.errors import UnavailableError
from ext_authz.responses import denial_parts
from ext_authz.service import MAX_LOGGED_REQUEST_ID, REQUEST_ID_HEADER
from limiter.engine import Limiter
from limiter.verdict import merge, rate_limit_headers, refund
from servicekit.check_contract import ROUTE_HEADER
from servicekit.http1_server import Request, response
from servicekit.span_export import SpanExporter
from servicekit.trace_context import TRACEPARENT

log = structlog.get_logger(component="ext_authz")

OK = b"HTTP/1.1 200 OK\r\n"
END = b"content-length: 0\r\n\r\n"


class HttpCheck:
    """The handler ``servicekit.http1_server.Http1Server`` calls for every check."""

    def __init__(
        self,
        table: RouteTable,
        *,
        on_unknown_route: Callable[[str], None] | None = None,
        spans: SpanExporter | None = None,
    ) -> None:
        self._table = table
        self._limiter = table.parts.get(Limiter)
        self._allowed = metrics.DECISIONS.labels("allow", "ok")
        self._public = metrics.DECISIONS.labels("allow", "public")
        self._unknown_logged: set[str] = set()
        self._on_unknown_route = on_unknown_route
        self._spans = spans

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
        route_id = request.headers.get(ROUTE_HEADER, "")
        route = self._table.routes.get(route_id)
        if route is None:
            return self._refused_route(route_id, request_id) if route_id in self._table.refused else self._unknown_route(route_id, request_id)
        call = Call(request, request_id, route.route)
        for step in route.steps:
            answer = await step.run(call)
            if answer is not None:
                if step.gives_back and call.spent and self._limiter is not None:
                    # A denied request uses nothing: the hits counted before go back.
                    for hits in call.spent:
                        await refund(self._limiter, hits)
                return answer
        (self._public if route.public else self._allowed).inc()
        verdict = merge(*call.spent)
        limits = header_lines(rate_limit_headers(verdict.binding, denied=False)) if verdict and verdict.binding else b""
        return OK + call.identity + call.upstream_token + limits + call.extra + END

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
