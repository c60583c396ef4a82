"""`envoy.service.ratelimit.v3.RateLimitService`: one decision per request, all limits at once.

Envoy sends one descriptor per limit of the matched route: ``[("limit", "<route>#<n>"),
(<key kind>, <value>)]``. Every limit must pass (shadow limits are counted, never
enforced). The answer carries ``X-RateLimit-Limit/Remaining/Reset`` for the binding limit
(the one that denied, or the one with the least left) and, on 429, ``Retry-After``; the
ratelimit filter's own header generation is off, so these are the only ones. A denied
request is not counted against the limits that passed it (``Limiter.refund``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import grpc
import structlog
from envoy.config.core.v3 import base_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
from google.protobuf import duration_pb2

from limiter import metrics
from limiter.engine import Limiter
from limiter.model import Decision, LimitSpec
from limiter.policies import descriptor_key, parse_policies
from limiter.verdict import decide, rate_limit_headers
from servicekit.protos.gatehouse.policy.v1 import policy_pb2
from servicekit.span_export import SpanExporter
from servicekit.trace_context import call_traceparent

log = structlog.get_logger(component="ratelimit")

DOMAIN = "gatehouse"
LIMIT_ENTRY = "limit"
_OK = rls_pb2.RateLimitResponse.OK
_OVER = rls_pb2.RateLimitResponse.OVER_LIMIT
_NO_LIMIT = rls_pb2.RateLimitResponse.DescriptorStatus(code=rls_pb2.RateLimitResponse.OK)
_UNITS = {
    1_000: rls_pb2.RateLimitResponse.RateLimit.SECOND,
    60_000: rls_pb2.RateLimitResponse.RateLimit.MINUTE,
    3_600_000: rls_pb2.RateLimitResponse.RateLimit.HOUR,
    86_400_000: rls_pb2.RateLimitResponse.RateLimit.DAY,
}


class PolicyTable:
    """The limits in force; replaced whole when the control plane sends new policies."""

    def __init__(self) -> None:
        self.specs: Mapping[str, LimitSpec] = {}
        self.keys: Mapping[str, str] = {}

    def apply(self, policies: list[policy_pb2.RoutePolicy]) -> None:
        """The table from the control plane's policies; ValueError (NACKed) if unusable."""
        self.replace(*parse_policies(policies))

    def replace(self, specs: dict[str, LimitSpec], keys: dict[str, str]) -> None:
        removed = self.specs.keys() - specs.keys()
        self.specs, self.keys = specs, keys
        for limit_id in removed:
            metrics.forget(limit_id)  # route churn must not grow /metrics forever


def _key(descriptor: Any, table: PolicyTable) -> tuple[LimitSpec, str] | None:
    """The limit a descriptor names and the key value it carries; None if it names none we know."""
    entries = descriptor.entries
    if len(entries) != 2 or entries[0].key != LIMIT_ENTRY:
        return None
    spec = table.specs.get(entries[0].value)
    if spec is None:
        return None
    kind = entries[1].key
    if kind != descriptor_key(table.keys.get(spec.id, "")):
        return None
    return spec, f"{kind}={entries[1].value}"


def _status(spec: LimitSpec, decision: Decision, enforced_denial: bool) -> rls_pb2.RateLimitResponse.DescriptorStatus:
    reset_ms = max(0, int(decision.reset_after * 1000))
    return rls_pb2.RateLimitResponse.DescriptorStatus(
        code=_OVER if enforced_denial else _OK,
        current_limit=rls_pb2.RateLimitResponse.RateLimit(
            name=spec.id,
            requests_per_unit=decision.limit,
            unit=_UNITS.get(spec.window_ms, rls_pb2.RateLimitResponse.RateLimit.UNKNOWN),
        ),
        limit_remaining=max(0, decision.remaining),
        duration_until_reset=duration_pb2.Duration(seconds=reset_ms // 1000, nanos=(reset_ms % 1000) * 1_000_000),
    )


def _header(key: str, value: str) -> base_pb2.HeaderValue:
    return base_pb2.HeaderValue(key=key, value=value)


class RateLimitService(rls_pb2_grpc.RateLimitServiceServicer):  # type: ignore[misc]
    def __init__(self, limiter: Limiter, table: PolicyTable, *, spans: SpanExporter | None = None) -> None:
        self._limiter = limiter
        self._table = table
        self._spans = spans

    async def ShouldRateLimit(  # noqa: N802 - gRPC method name
        self, request: rls_pb2.RateLimitRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> rls_pb2.RateLimitResponse:
        if self._spans is None:
            return await self._decide(request)
        start = time.time_ns()
        response = await self._decide(request)
        entries = request.descriptors[0].entries if request.descriptors else ()
        limit = entries[0].value if entries and entries[0].key == LIMIT_ENTRY else ""
        self._spans.record(
            call_traceparent(context), "ratelimit decision", start, time.time_ns(),
            (("gatehouse.route", limit.partition("#")[0]),
             ("gatehouse.decision", "over_limit" if response.overall_code == _OVER else "ok"),
             ("gatehouse.descriptors", len(request.descriptors))),
        )
        return response

    async def _decide(self, request: rls_pb2.RateLimitRequest) -> rls_pb2.RateLimitResponse:
        if request.domain != DOMAIN:
            return rls_pb2.RateLimitResponse(overall_code=_OK)
        cost = request.hits_addend or 1
        named = [_key(d, self._table) for d in request.descriptors]
        known = [n for n in named if n is not None]
        if not known:
            return rls_pb2.RateLimitResponse(overall_code=_OK, statuses=[_NO_LIMIT for _ in named])
        verdict = await decide(self._limiter, known, cost)
        decisions = iter(verdict.decisions)
        statuses = []
        for item in named:
            if item is None:
                statuses.append(_NO_LIMIT)
                continue
            spec, _ = item
            decision = next(decisions)
            statuses.append(_status(spec, decision, not decision.allowed and not spec.shadow))
        response = rls_pb2.RateLimitResponse(overall_code=_OVER if verdict.denied else _OK, statuses=statuses)
        if verdict.binding is not None:
            response.response_headers_to_add.extend(_header(k, v) for k, v in rate_limit_headers(verdict.binding, verdict.denied))
        return response
