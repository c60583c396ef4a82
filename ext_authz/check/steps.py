"""A route's check as ordered steps, and the two rate-limit steps.

Each route's policy compiles into the steps that apply to it (``route_table``), in the
order of ``route_table.STEP_ORDER``; a request runs them one after the other until one
answers for it (a denial) or all pass (200). A step says two things besides what it does:

- ``for_route``: the step for a route's policy, None if the route asks nothing of it, or
  ``Refused`` with why when this process cannot enforce what the route asks (the route is
  then refused alone, ``route_table``);
- ``gives_back``: whether, when it denies, the limit hits counted before it go back (a
  denied request then uses nothing, as with the RateLimitService) or stay counted (a
  client guessing credentials, or sending invalid requests, spends its quota).

Steps write what the 200 carries into the ``Call``: the identity headers, the upstream's
own token, a waiting room's cookie; the binding limit's ``X-RateLimit-*`` come from the
hits counted (``spent``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, runtime_checkable

from limiter.engine import Limiter
from limiter.model import LimitSpec
from limiter.policies import descriptor_key, limit_spec
from limiter.verdict import Verdict, decide, rate_limit_headers
from servicekit.check_contract import API_KEY_HEADER, FORWARDED_FOR, RATE_LIMITED
from servicekit.http1_server import Request, response
from servicekit.protos.gatehouse.policy.v1 import policy_pb2


class Refused(Exception):
    """This process cannot enforce what a route asks of a step; ``str()`` says why."""


T = TypeVar("T")


@runtime_checkable
class TableScoped(Protocol):
    """A part that keeps per-table state (validation's compiled schemas): told when a
    route table starts and ends compiling."""

    def begin(self) -> None: ...

    def done(self) -> None: ...


class CheckParts:
    """What this process has for the steps to use (the authorizer, the denial audit, the
    limiter, the waiting-room gate, the key store, token swap, validation's compiler),
    found by type: a step takes the parts it needs, and refuses the routes it cannot serve
    without them. The route table and the check never name a feature's part."""

    def __init__(self, *parts: object) -> None:
        self._parts = tuple(part for part in parts if part is not None)
        self.identities: dict[tuple[bytes, str], bytes] = {}
        """Identity header lines by (token hash, issuer): they depend on the token alone, so
        every route of this process renders them once per token (``credential``)."""

    def get(self, kind: type[T]) -> T | None:
        return next((part for part in self._parts if isinstance(part, kind)), None)

    def need(self, kind: type[T], why: str) -> T:
        found = self.get(kind)
        if found is None:
            raise Refused(why)
        return found

    def table_scoped(self) -> list[TableScoped]:
        return [part for part in self._parts if isinstance(part, TableScoped)]


@dataclass(slots=True)
class Call:
    """One request as it goes through its route's steps."""

    request: Request
    request_id: str
    route: str
    spent: list[Verdict] = field(default_factory=list)
    """The limit hits counted so far, in order."""
    user: str | None = None
    """The verified caller's principal, ``x-principal`` (``user`` limits count by it: the
    user id with its source, so two issuers' or a key's ``123`` never share a count)."""
    token: object | None = None
    """What the credential step verified (a token, or an API key's caller)."""
    identity: bytes = b""
    """The identity header lines of the 200."""
    upstream_token: bytes = b""
    """The upstream's own ``authorization`` line (token swap)."""
    extra: bytes = b""
    """More lines of the 200 (a waiting room's cookie)."""


class Step(Protocol):
    gives_back: bool

    async def run(self, call: Call) -> bytes | None:
        """None: the request goes on; bytes: the answer that stops it."""
        ...


def header_lines(headers: list[tuple[str, str]]) -> bytes:
    return b"".join(f"{name}: {value}\r\n".encode("latin-1") for name, value in headers)


@dataclass(frozen=True, slots=True)
class RouteLimit:
    spec: LimitSpec
    key: str
    """The policy key: ``user``, ``ip``, ``apiKey`` or ``header:<name>``."""


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


def counter_keys(limits: tuple[RouteLimit, ...], headers: Mapping[str, str], user: str | None) -> list[tuple[LimitSpec, str]]:
    """(spec, counter key) for each limit whose key the request carries, as the
    RateLimitService forms them from Envoy's descriptors (so switching transports keeps
    every count)."""
    found = []
    for limit in limits:
        value = _key_value(limit, headers, user)
        if value:
            found.append((limit.spec, f"{descriptor_key(limit.key)}={value}"))
    return found


def too_many(verdict: Verdict, request_id: str) -> bytes:
    """429 with ``X-RateLimit-*``, ``Retry-After`` and the gateway's ``rate_limited`` body."""
    assert verdict.binding is not None
    code, message = RATE_LIMITED
    body = json.dumps({"error": {"code": code, "message": message, "request_id": request_id}}, separators=(",", ":")).encode()
    lines = [("content-type", "application/json"), ("cache-control", "no-store")]
    return response(429, [*lines, *rate_limit_headers(verdict.binding, denied=True)], body)


def route_limits(policy: policy_pb2.RoutePolicy) -> list[RouteLimit]:
    return [RouteLimit(limit_spec(limit), limit.key) for limit in policy.limits]


class _Limits:
    """Count the request against some of the route's limits; a denial is 429 and gives
    back the hits counted before it."""

    gives_back = True

    def __init__(self, limits: tuple[RouteLimit, ...], limiter: Limiter) -> None:
        self._limits = limits
        self._limiter = limiter

    async def run(self, call: Call) -> bytes | None:
        keys = counter_keys(self._limits, call.request.headers, call.user)
        if not keys:
            return None
        verdict = await decide(self._limiter, keys)
        if verdict.denied:
            return too_many(verdict, call.request_id)
        call.spent.append(verdict)
        return None


def _limited(policy: policy_pb2.RoutePolicy, parts: CheckParts, wanted: bool) -> tuple[tuple[RouteLimit, ...], Limiter] | None:
    limits = tuple(limit for limit in route_limits(policy) if (limit.key == "user") == wanted)
    if not limits:
        return None
    return limits, parts.need(Limiter, "has rate limits for this call, and ext_authz has no http.rateLimit")


class LimitsBeforeCredential(_Limits):
    """Limits whose key does not depend on who calls (``ip``, ``apiKey``, ``header:``):
    counted before the credential is looked at, so a client guessing tokens is limited too."""

    @classmethod
    def for_route(cls, policy: policy_pb2.RoutePolicy, parts: CheckParts) -> LimitsBeforeCredential | None:
        found = _limited(policy, parts, wanted=False)
        return cls(*found) if found is not None else None


class LimitsAfterCredential(_Limits):
    """``user`` limits, keyed on the verified caller; never on a public route (no caller)."""

    @classmethod
    def for_route(cls, policy: policy_pb2.RoutePolicy, parts: CheckParts) -> LimitsAfterCredential | None:
        found = _limited(policy, parts, wanted=True)
        return cls(*found) if found is not None and not policy.auth.public else None
