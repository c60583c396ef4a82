"""The gateway's own error responses: one JSON body, whatever Envoy refused and why.

Envoy answers some requests itself (a *local reply*): no route matched, the circuit
breaker is open, no healthy host, the upstream timed out, the rate limit denied, the
request is too large. The HTTP connection manager's ``local_reply_config`` rewrites those
replies into

    {"error": {"code": "not_found", "message": "...", "request_id": "<x-request-id>"}}

with ``content-type: application/json``. Responses that an upstream generated are never
local replies, so their bodies pass through untouched.

ext_authz denials are local replies too (401/403, and 503 when the Authorization
service is unreachable), and ext_authz writes its own JSON body. So no mapper here
matches on a status code ext_authz uses: each matches on Envoy's *response flags*
(``NR``, ``UO``, ``UH``, ``UT``, ...), which name Envoy's reason, on a status ext_authz
never answers with (413, 431), or, for filters that set no flag (RBAC's 403, the shield's
429, the low-priority limit's 503, back pressure's 503), on Envoy's response code details with a CEL filter.
There is no top-level ``body_format``: a local reply no mapper matches keeps its body as
its filter wrote it.

A HALF_OPEN breaker's denied non-probe (the local_ratelimit probe bucket of
breaker_phases) is told from the shield's 429 by its ``x-gatehouse-breaker`` header and
gets ``circuit_open``; an OPEN breaker's own answer is a direct response with its body.

A 431 is answered before Envoy has the request's headers: its ``request_id`` is null.

A route's ``disabled`` answer is a direct response, also a local reply without a flag:
its own body stays, except when it answers 413 or 431, which get this JSON body.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from servicekit.check_contract import RATE_LIMITED
from servicekit.check_contract import WAITING_ROOM_HEADER as WAITING_ROOM_HEADER

REQUEST_ID = "%REQ(X-REQUEST-ID)%"
BREAKER_HEADER = "x-gatehouse-breaker"
"""Marks a breaker's fallback answers (telemetry's FALLBACK_HEADER: they never count as calls)."""
CEL_FILTER_TYPE = "type.googleapis.com/envoy.extensions.access_loggers.filters.cel.v3.ExpressionFilter"
USER_REQUIRED_POLICY = "cache-needs-user"
"""The RBAC policy of a varyByUser cache's guard (response_cache), named in its 403's details."""


@dataclass(frozen=True, slots=True)
class GatewayError:
    code: str
    """Stable, machine-readable: clients branch on it."""
    message: str
    status: int | None = None
    """Rewrite the status to this; None keeps Envoy's."""
    flags: tuple[str, ...] = ()
    """Envoy response flags (any of them matches)."""
    status_code: int | None = None
    """Or: match replies with this status."""
    details_prefix: str | None = None
    """Or: match replies whose response code details start with this (a CEL filter), for
    filters that set no response flag (RBAC, local_ratelimit)."""
    expression: str | None = None
    """Or: match replies for which this CEL expression holds."""
    keep_body: bool = False
    """Rewrite the status only: the body its filter wrote stays (the waiting room's JSON)."""


# First match wins: a reply may carry several flags (a timeout after retries: UT and URX).
CIRCUIT_OPEN_MESSAGE = "The upstream service is failing; the gateway is not sending it requests. Retry later."
GATEWAY_ERRORS: tuple[GatewayError, ...] = (
    # A HALF_OPEN breaker's probe budget is spent: its local_ratelimit bucket denies with
    # the breaker header (before the shield's rate_limited, which has the same details).
    GatewayError(
        "circuit_open",
        CIRCUIT_OPEN_MESSAGE,
        503,
        expression=f"response.code_details.startsWith('local_rate_limited') && '{BREAKER_HEADER}' in response.headers",
    ),
    # The waiting room's answers (waiting, full, unavailable): 503, their own body kept.
    GatewayError(
        "waiting_room",
        "",
        503,
        expression=f"response.code_details.startsWith('ext_authz_denied') && '{WAITING_ROOM_HEADER}' in response.headers",
        keep_body=True,
    ),
    GatewayError("not_found", "No route matches this request.", 404, flags=("NR",)),
    GatewayError("upstream_timeout", "The upstream service did not answer in time.", 504, flags=("UT",)),
    GatewayError("upstream_overflow", "The upstream service is at capacity; retry later.", 503, flags=("UO",)),
    # OM: the overload manager; reached_concurrency_limit: low-priority shedding (no flag).
    GatewayError(
        "overloaded",
        "The gateway is overloaded; retry later.",
        503,
        flags=("OM",),
        details_prefix="reached_concurrency_limit",
    ),
    # denied_by_admission_control: a backPressure cluster refused to send (no flag).
    GatewayError(
        "back_pressure",
        "The upstream service is failing; the gateway is sending it fewer requests. Retry later.",
        503,
        details_prefix="denied_by_admission_control",
    ),
    GatewayError("no_healthy_upstream", "No healthy upstream host is available.", 503, flags=("UH",)),
    GatewayError(
        "upstream_unavailable",
        "The upstream service could not be reached.",
        None,
        flags=("UF", "UC", "UR", "URX", "LR", "NC"),
    ),
    # RL: the global rate limit; local_rate_limited: a route's shield (local_ratelimit sets no flag).
    GatewayError(
        *RATE_LIMITED, 429, flags=("RL",), details_prefix="local_rate_limited"
    ),
    # A varyByUser cache's guard (response_cache), before the access list's RBAC denial.
    GatewayError(
        "user_required",
        "This route keeps answers per user, and the token names no user.",
        403,
        details_prefix=f"rbac_access_denied_matched_policy[{USER_REQUIRED_POLICY}]",
    ),
    GatewayError(
        "access_denied", "Requests from this address are not allowed.", 403, details_prefix="rbac_access_denied"
    ),
    GatewayError("rate_limit_unavailable", "The rate-limit service could not be reached.", None, flags=("RLSE",)),
    # A swap route's upstream token could not be had (ext_authz/swap/tokens.py answers
    # 424 with this header: a 5xx would count as the service failing, and fail open).
    GatewayError(
        "upstream_token_unavailable",
        "The gateway could not obtain the upstream service's credential. Retry later.",
        503,
        expression="response.code_details.startsWith('ext_authz_denied') && response.code == 424"
        " && 'x-gatehouse-upstream-token' in response.headers",
    ),
    # The Authorization service could not answer (its own denials carry ext_authz_denied
    # and their own JSON body, so only the error case is matched here).
    GatewayError(
        "authorization_unavailable",
        "The authorization service could not be reached.",
        None,
        details_prefix="ext_authz_error",
    ),
    GatewayError("request_timeout", "The request was idle for too long.", None, flags=("SI",)),
    GatewayError("request_body_too_large", "The request body is larger than the gateway accepts.", status_code=413),
    # A route's match.otherMethods: reject (method_guard): a direct 405 with Allow.
    GatewayError("method_not_allowed", "This path does not take the request's method; see Allow.", status_code=405),
    GatewayError("request_headers_too_large", "The request headers are larger than the gateway accepts.", status_code=431),
)


def error_body(error: GatewayError) -> dict[str, Any]:
    """The JSON body as an Envoy ``json_format``: command operators fill in per request."""
    return {"error": {"code": error.code, "message": error.message, "request_id": REQUEST_ID}}


def _filter(error: GatewayError) -> dict[str, Any]:
    found: list[dict[str, Any]] = []
    if error.flags:
        found.append({"response_flag_filter": {"flags": list(error.flags)}})
    expressions = [f"response.code_details.startsWith('{error.details_prefix}')"] if error.details_prefix else []
    expressions += [error.expression] if error.expression is not None else []
    for expression in expressions:
        found.append(
            {
                "extension_filter": {
                    "name": "envoy.access_loggers.extension_filters.cel",
                    "typed_config": {"@type": CEL_FILTER_TYPE, "expression": expression},
                }
            }
        )
    if error.status_code is not None:
        comparison = {"op": "EQ", "value": {"default_value": error.status_code, "runtime_key": "gatehouse.unused"}}
        found.append({"status_code_filter": {"comparison": comparison}})
    assert found, error
    return found[0] if len(found) == 1 else {"or_filter": {"filters": found}}


def mapper(error: GatewayError) -> dict[str, Any]:
    data: dict[str, Any] = {"filter": _filter(error)}
    if not error.keep_body:
        data["body_format_override"] = {"json_format": error_body(error), "content_type": "application/json"}
    if error.status is not None:
        data["status_code"] = error.status
    return data


def local_reply_config() -> dict[str, Any]:
    """The HCM's ``local_reply_config``: one mapper per gateway error, no default body format."""
    return {"mappers": [mapper(error) for error in GATEWAY_ERRORS]}
