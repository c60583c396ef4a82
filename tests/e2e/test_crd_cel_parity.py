"""Every CEL rule of the generated Route CRD agrees with its Python check.

Each rule in the CRD (``x-kubernetes-validations``, written next to a model's Python
validator with ``cel(...)``) has rows in ``TABLE``: documents that break that rule and
no other, which both the Python model and a real kube-apiserver must refuse (the API
server naming that rule and nothing else, Python with the expected reason), and documents
at the edge of the rule, which both must accept. The same document goes to both sides:
to ``parse_object`` (how the control plane judges a Route object) and, as a server-side
dry run (``?dryRun=All``, what ``kubectl apply --dry-run=server`` sends), to the API
server with the CRD generated from the model.

``test_every_cel_rule_has_cases`` enumerates the rules from the generated CRD: a rule
added without a row here fails it, and so does a row for a rule the CRD lost.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from control_plane.model.crd import custom_resource_definition
from control_plane.sources.kubernetes.routes import parse_object
from gatehouse.commands.crd import render_crd
from tests.harness.kubernetes import KubeAPIServer

Spec = dict[str, Any]
DROP = object()
"""In a row's spec: remove this key from ``BASE``."""
BASE: Spec = {"match": {"pathPrefix": "/p"}, "backends": [{"service": "svc", "port": 8080}]}
"""A valid spec; each row changes some of its top-level keys."""
NAMESPACE = "default"
PUBLIC = {"required": False}
CACHE_OK: Spec = {"auth": PUBLIC}
"""With ``cache``, a public route (a cached route that requires a token needs varyByUser)."""


@dataclass(frozen=True)
class Refused:
    spec: Spec
    python: str | None = None
    """A text in Python's reason; None: the rule's own message."""


@dataclass(frozen=True)
class Rule:
    name: str
    path: str
    """Where the rule sits in the CRD's schema: "spec.timeouts", "spec.rateLimits[]"."""
    message: str
    refused: tuple[Refused, ...]
    accepted: tuple[Spec, ...]

    @property
    def key(self) -> tuple[str, str]:
        return self.path, self.message


def rule(name: str, path: str, message: str, *, refused: list[Spec | Refused], accepted: list[Spec]) -> Rule:
    return Rule(name, path, message, tuple(r if isinstance(r, Refused) else Refused(r) for r in refused), tuple(accepted))


def spec_of(changes: Spec) -> Spec:
    spec = {**BASE, **changes}
    return {key: value for key, value in spec.items() if value is not DROP}


def one(backend: str = "svc", **fields: Any) -> dict[str, Any]:
    return {"service": backend, "port": 8080, **fields}


TIMEOUT_MESSAGES = ("perTry must not exceed request", "perTry must not exceed request (10s, the default)",
                    "request must not exceed idle", "connect must be less than perTry and request")
CACHE_BYPASS = ("cache: Envoy's cache fetches a miss itself, past the route's rewrite, retries, perTry timeout, "
                "request headers and backend weights; a cached route has one backend and none of these")

TABLE: list[Rule] = [
    # --- spec: rules between features ---------------------------------------------------
    rule(
        "fallback-needs-breaker", "spec", "fallback: a fallback is served only by a breaker; set circuitBreaker.errorRate",
        refused=[
            {"fallback": {"circuitOpen": True}},
            {"fallback": {"circuitOpen": True}, "circuitBreaker": {"maxConnections": 10}},
        ],
        accepted=[{"fallback": {"circuitOpen": True}, "circuitBreaker": {"errorRate": {"windowCalls": 10}}}],
    ),
    rule(
        "backend-required", "spec", "at least one backend is required (or set disabled)",
        refused=[{"backends": DROP}, {"backends": []}],
        accepted=[{"backends": DROP, "disabled": {}}, {"backends": [], "disabled": {"status": 404}}],
    ),
    rule(
        "backend-weight", "spec", "at least one backend needs a weight above 0",
        refused=[{"backends": [one(weight=0)]}, {"backends": [one("a", weight=0), one("b", weight=0)]}],
        accepted=[{"backends": [one("a", weight=0), one("b", weight=1)]}, {"backends": [one()]},
                  {"backends": [one(weight=0)], "disabled": {}}],
    ),
    rule(
        "rewrite-prefix-regex-path", "spec", "rewrite.prefix: a pathRegex route has no prefix to swap; use rewrite.regex",
        refused=[{"match": {"pathRegex": "/a.*"}, "rewrite": {"prefix": "/b"}}],
        accepted=[
            {"match": {"pathRegex": "/a.*"}, "rewrite": {"regex": "^/a", "substitution": "/b"}},
            {"match": {"path": "/a/{id}"}, "rewrite": {"prefix": "/b"}},
        ],
    ),
    rule(
        "retries-methods", "spec",
        "retries apply to GET, HEAD, OPTIONS, PUT and DELETE only (POST and PATCH with retries.idempotencyKeyHeader); "
        "this route matches none of them",
        refused=[
            Refused({"match": {"pathPrefix": "/p", "methods": ["POST"]}, "retries": {"attempts": 2}},
                    "retries: the route only matches non-idempotent methods (POST)"),
            Refused({"match": {"pathPrefix": "/p", "methods": ["POST", "PATCH", "TRACE"]}, "retries": {}},
                    "retries apply to GET, HEAD, OPTIONS, PUT and DELETE only"),
        ],
        accepted=[
            {"match": {"pathPrefix": "/p", "methods": ["POST"]}, "retries": {"attempts": 0}},
            {"match": {"pathPrefix": "/p", "methods": ["POST"]}, "retries": {"idempotencyKeyHeader": "idempotency-key"}},
            {"match": {"pathPrefix": "/p", "methods": ["POST", "DELETE"]}, "retries": {}},
            {"match": {"pathPrefix": "/p", "methods": []}, "retries": {}},
        ],
    ),
    rule(
        "cache-needs-vary-by-user", "spec",
        "cache: this route requires a token (auth.required, the default), and a cached answer could reach "
        "another user; set cache.varyByUser: true (one entry per verified user) or auth.required: false",
        refused=[{"cache": {"ttl": "1m"}}, {"cache": {"ttl": "1m", "varyByUser": False}, "auth": {"required": True}}],
        accepted=[{"cache": {"ttl": "1m", "varyByUser": True}}, {"cache": {"ttl": "1m"}, "auth": PUBLIC}],
    ),
    rule(
        "vary-by-user-needs-auth", "spec",
        "cache.varyByUser: this route is public (auth.required: false); there is no verified user to key by",
        refused=[{"cache": {"ttl": "1m", "varyByUser": True}, "auth": PUBLIC}],
        accepted=[{"cache": {"ttl": "1m", "varyByUser": False}, "auth": PUBLIC},
                  {"cache": {"ttl": "1m", "varyByUser": True}, "auth": {"required": True}}],
    ),
    rule(
        "cache-methods", "spec", "cache: only GET and HEAD answers are cached; this route matches neither",
        refused=[Refused({**CACHE_OK, "cache": {"ttl": "1m"}, "match": {"pathPrefix": "/p", "methods": ["POST", "PUT"]}},
                         "cache: only GET and HEAD answers are cached; this route matches POST, PUT")],
        accepted=[{**CACHE_OK, "cache": {"ttl": "1m"}, "match": {"pathPrefix": "/p", "methods": ["POST", "HEAD"]}},
                  {**CACHE_OK, "cache": {"ttl": "1m"}, "match": {"pathPrefix": "/p", "methods": []}}],
    ),
    rule(
        "cache-bypassed", "spec", CACHE_BYPASS,
        refused=[
            Refused({**CACHE_OK, "cache": {"ttl": "1m"}, **changes}, f"cache: cannot be combined with {named}")
            for named, changes in [
                ("rewrite", {"rewrite": {"prefix": "/b"}}),
                ("retries", {"retries": {"attempts": 0}}),
                ("timeouts.perTry", {"timeouts": {"perTry": "1s"}}),
                ("headers.request", {"headers": {"request": {"set": {"x-a": "1"}}}}),
                ("headers.request", {"headers": {"request": {"remove": ["x-a"]}}}),
                ("more than one backend", {"backends": [one("a"), one("b", weight=0)]}),
                ("disabled", {"disabled": {}}),
            ]
        ],
        accepted=[
            {**CACHE_OK, "cache": {"ttl": "1m"}, "timeouts": {"request": "5s", "idle": "1m"},
             "headers": {"request": {"set": {}, "remove": []}, "response": {"set": {"x-a": "1"}}}},
            {**CACHE_OK, "cache": {"ttl": "1m"}, "backends": [one(weight=5)], "headers": {}, "timeouts": {}},
        ],
    ),
    # --- match --------------------------------------------------------------------------
    rule(
        "match-one-path", "spec.match", "set exactly one of path, pathPrefix, pathRegex",
        refused=[
            Refused({"match": {}}, "set exactly one of path, pathPrefix, pathRegex (got none)"),
            Refused({"match": {"path": "/a", "pathPrefix": "/a"}}, "(got ['path', 'pathPrefix'])"),
            {"match": {"path": "/a", "pathPrefix": "/a", "pathRegex": "/a"}},
        ],
        accepted=[{"match": {"path": "/a"}}, {"match": {"pathRegex": "/a"}}],
    ),
    rule(
        "other-methods-reject", "spec.match", "otherMethods: reject answers 405 to the methods not in methods; set methods",
        refused=[{"match": {"pathPrefix": "/p", "otherMethods": "reject"}},
                 {"match": {"pathPrefix": "/p", "otherMethods": "reject", "methods": []}}],
        accepted=[{"match": {"pathPrefix": "/p", "otherMethods": "reject", "methods": ["GET"]}},
                  {"match": {"pathPrefix": "/p", "otherMethods": "fallThrough"}}],
    ),
    rule(
        "header-match-one", "spec.match.headers[]", "set exactly one of exact, prefix, regex, present",
        refused=[
            Refused({"match": {"pathPrefix": "/p", "headers": [{"name": "x-a"}]}}, "(got none)"),
            Refused({"match": {"pathPrefix": "/p", "headers": [{"name": "x-a", "exact": "1"}, {"name": "x-b", "exact": "1", "present": True}]}},
                    "(got ['exact', 'present'])"),
        ],
        accepted=[{"match": {"pathPrefix": "/p", "headers": [{"name": "x-a", "present": False}]}},
                  {"match": {"pathPrefix": "/p", "headers": [{"name": "x-a", "regex": "^a", "invert": True}]}}],
    ),
    rule(
        "header-match-unmatchable", "spec.match.headers[]",
        "match.headers: x-user-id, x-user-role, x-scope, x-consumer, x-principal and x-gatehouse-* cannot select a route: "
        "a route is chosen before the client's copy is removed",
        refused=[
            Refused({"match": {"pathPrefix": "/p", "headers": [{"name": "x-user-id", "exact": "alice"}]}},
                    "x-user-id is an identity header, and a route is chosen before the client's copy is removed"),
            Refused({"match": {"pathPrefix": "/p", "headers": [{"name": "x-consumer", "present": True}]}}, "x-consumer is an identity header"),
            Refused({"match": {"pathPrefix": "/p", "headers": [{"name": "x-principal", "present": True}]}}, "x-principal is an identity header"),
            Refused({"match": {"pathPrefix": "/p", "headers": [{"name": "x-gatehouse-route", "present": True}]}},
                    "x-gatehouse-route is internal to the gateway"),
        ],
        accepted=[{"match": {"pathPrefix": "/p", "headers": [{"name": "x-user-ids", "exact": "a"}]}},
                  {"match": {"pathPrefix": "/p", "headers": [{"name": "x-gatehouse", "present": True}]}},
                  {"match": {"pathPrefix": "/p", "headers": [{"name": "authorization", "present": True}]}}],
    ),
    # --- rewrite ------------------------------------------------------------------------
    rule(
        "rewrite-one-kind", "spec.rewrite", "set exactly one of prefix or regex",
        refused=[{"rewrite": {}}],
        accepted=[{"rewrite": {"prefix": "/"}}, {"rewrite": {"regex": "^/p", "substitution": "/q"}}],
    ),
    rule(
        "rewrite-regex-substitution", "spec.rewrite", "regex needs a substitution",
        refused=[{"rewrite": {"regex": "^/p"}}],
        accepted=[{"rewrite": {"regex": "^/p", "substitution": ""}}],
    ),
    rule(
        "rewrite-substitution-regex", "spec.rewrite", "substitution only goes with regex",
        refused=[{"rewrite": {"prefix": "/q", "substitution": "/r"}}],
        accepted=[{"rewrite": {"prefix": "/q"}}],
    ),
    # --- headers ------------------------------------------------------------------------
    rule(
        "request-headers-reserved", "spec.headers.request",
        "headers.request: x-user-id, x-user-role, x-scope, x-consumer, x-principal, authorization, host, x-forwarded-for, "
        "x-gatehouse-* and x-envoy-* are the gateway's; a route may not set or remove them",
        refused=[
            Refused({"headers": {"request": {"set": {"x-user-id": "alice"}}}}, "x-user-id is an identity header"),
            Refused({"headers": {"request": {"set": {"x-a": "1", "x-scope": "admin"}}}}, "x-scope is an identity header"),
            Refused({"headers": {"request": {"remove": ["x-principal"]}}}, "x-principal is an identity header"),
            Refused({"headers": {"request": {"remove": ["authorization"]}}}, "authorization is what the gateway vouches for"),
            Refused({"headers": {"request": {"set": {"x-forwarded-for": "10.0.0.1"}}}}, "x-forwarded-for is what the gateway vouches for"),
            Refused({"headers": {"request": {"remove": ["x-a", "x-gatehouse-ticket"]}}}, "x-gatehouse-ticket is internal to the gateway"),
            Refused({"headers": {"request": {"set": {"x-envoy-retry-on": "5xx"}}}}, "x-envoy-retry-on is internal to the gateway"),
        ],
        accepted=[
            {"headers": {"request": {"set": {"x-user-ids": "a", "x-envoy": "b"}, "remove": ["x-gatehouse", "cookie"]}}},
            {"headers": {"response": {"set": {"x-user-id": "a"}, "remove": ["x-gatehouse-route"]}}},
        ],
    ),
    # --- auth ---------------------------------------------------------------------------
    rule(
        "upstream-token-public", "spec.auth",
        "upstreamToken: a public route (required: false) has no verified subject to put in a token",
        refused=[{"auth": {"required": False, "upstreamToken": {"audience": "legacy"}}}],
        accepted=[{"auth": {"required": True, "upstreamToken": {"audience": "legacy"}}},
                  {"auth": {"upstreamToken": {"audience": "legacy"}}}],
    ),
    rule(
        "max-token-age-public", "spec.auth", "maxTokenAge: a public route (required: false) checks no token",
        refused=[{"auth": {"required": False, "maxTokenAge": "5m"}}],
        accepted=[{"auth": {"required": True, "maxTokenAge": "5m"}}, {"auth": {"maxTokenAge": "5m"}}],
    ),
    rule(
        "max-token-age-keys", "spec.auth",
        "maxTokenAge: bounds a token's age, and an API key has none; serve API keys on another route",
        refused=[{"auth": {"apiKeys": True, "maxTokenAge": "5m"}}],
        accepted=[{"auth": {"apiKeys": False, "maxTokenAge": "5m"}}, {"auth": {"apiKeys": True}}],
    ),
    rule(
        "issuers-public", "spec.auth", "issuers: a public route (required: false) checks no token",
        refused=[{"auth": {"required": False, "issuers": ["https://a.test/"]}}],
        accepted=[{"auth": {"required": True, "issuers": ["https://a.test/"]}}, {"auth": {"issuers": ["https://a.test/"]}}],
    ),
    rule(
        "issuers-keys-only", "spec.auth", "issuers: a route that takes only API keys (jwt: false) reads no token",
        refused=[{"auth": {"apiKeys": True, "jwt": False, "issuers": ["https://a.test/"]}}],
        accepted=[{"auth": {"apiKeys": True, "jwt": True, "issuers": ["https://a.test/"]}}, {"auth": {"apiKeys": True, "jwt": False}}],
    ),
    rule(
        "max-token-age-bounds", "spec.auth", "maxTokenAge must be from 1s to 24h",
        refused=[Refused({"auth": {"maxTokenAge": "999ms"}}, "maxTokenAge (999ms) must be from 1s to 24h"),
                 Refused({"auth": {"maxTokenAge": "24h1ms"}}, "maxTokenAge (86400001ms) must be from 1s to 24h")],
        accepted=[{"auth": {"maxTokenAge": "1s"}}, {"auth": {"maxTokenAge": "24h"}}],
    ),
    rule(
        "consumers-listed", "spec.auth.consumers", "list consumers in allow or deny",
        refused=[{"auth": {"apiKeys": True, "consumers": {}}},
                 {"auth": {"apiKeys": True, "consumers": {"allow": [], "deny": []}}}],
        accepted=[{"auth": {"apiKeys": True, "consumers": {"deny": ["partner-a"]}}},
                  {"auth": {"apiKeys": True, "consumers": {"allow": ["partner-a"], "deny": []}}}],
    ),
    rule(
        "token-exchange-url", "spec.auth.upstreamToken.exchange", "url must be an http(s) URL",
        refused=[
            Refused({"auth": {"upstreamToken": {"audience": "a", "exchange": {"url": "ftp://sts.example/token"}}}},
                    "url: 'ftp://sts.example/token' is not an http(s) URL with a host"),
            Refused({"auth": {"upstreamToken": {"audience": "a", "exchange": {"url": "sts.example/https://"}}}},
                    "is not an http(s) URL with a host"),
        ],
        accepted=[{"auth": {"upstreamToken": {"audience": "a", "exchange": {"url": "http://sts"}}}},
                  {"auth": {"upstreamToken": {"audience": "a", "exchange": {"url": "HTTPS://sts.example/token"}}}},
                  {"auth": {"upstreamToken": {"audience": "a", "exchange": {"url": "https://sts.example:8443/token"}}}}],
    ),
    # --- rate limits --------------------------------------------------------------------
    rule(
        "rate-limit-fields", "spec.rateLimits[]",
        "tokenBucket takes capacity and refill; slidingWindow and fixedWindow take limit and window",
        refused=[
            Refused({"rateLimits": [{"key": "user", "limit": 10}]}, "slidingWindow needs limit and window"),
            Refused({"rateLimits": [{"key": "ip", "algorithm": "fixedWindow", "limit": 10, "window": "1s", "refill": "1/1s"}]},
                    "fixedWindow takes limit and window, not capacity and refill"),
            Refused({"rateLimits": [{"key": "user", "limit": 1, "window": "1s"}, {"key": "ip", "algorithm": "tokenBucket", "capacity": 5}]},
                    "tokenBucket needs capacity and refill"),
            Refused({"rateLimits": [{"key": "ip", "algorithm": "tokenBucket", "capacity": 5, "refill": "1/10s", "window": "1s"}]},
                    "tokenBucket takes capacity and refill, not limit and window"),
        ],
        accepted=[
            {"rateLimits": [{"key": "user", "limit": 10, "window": "1m"}]},
            {"rateLimits": [{"key": "ip", "algorithm": "tokenBucket", "capacity": 5, "refill": "1/10s"}]},
            {"rateLimits": [{"key": "header:x-tenant", "algorithm": "fixedWindow", "limit": 1, "window": "1h", "shadow": True}]},
        ],
    ),
    # --- timeouts -----------------------------------------------------------------------
    rule(
        "per-try-within-request", "spec.timeouts", TIMEOUT_MESSAGES[0],
        refused=[Refused({"timeouts": {"request": "1s", "perTry": "1001ms"}}, "perTry (1001ms) must not exceed request (1s)")],
        accepted=[{"timeouts": {"request": "2s", "perTry": "2s"}}, {"timeouts": {"request": "1m", "perTry": "59s"}}],
    ),
    rule(
        "per-try-within-default-request", "spec.timeouts", TIMEOUT_MESSAGES[1],
        refused=[Refused({"timeouts": {"perTry": "10001ms"}}, "perTry (10001ms) must not exceed request (10s, the default)")],
        accepted=[{"timeouts": {"perTry": "10s"}}],
    ),
    rule(
        "request-within-idle", "spec.timeouts", TIMEOUT_MESSAGES[2],
        refused=[
            Refused({"timeouts": {"request": "5s", "idle": "4999ms"}}, "request (5s) must not exceed idle (4999ms)"),
            Refused({"timeouts": {"idle": "9s"}}, "request (10s, the default) must not exceed idle (9s)"),
        ],
        accepted=[{"timeouts": {"request": "5s", "idle": "5s"}}, {"timeouts": {"idle": "10s"}}, {"timeouts": {"request": "1m", "idle": "1h"}}],
    ),
    rule(
        "connect-within-try", "spec.timeouts", TIMEOUT_MESSAGES[3],
        refused=[
            Refused({"timeouts": {"connect": "2s", "perTry": "2s"}}, "connect (2s) must be less than perTry (2s)"),
            Refused({"timeouts": {"connect": "5s", "request": "5s"}}, "connect (5s) must be less than request (5s)"),
            Refused({"timeouts": {"connect": "10s"}}, "connect (10s) must be less than request (10s, the default)"),
        ],
        accepted=[{"timeouts": {"connect": "1999ms", "perTry": "2s"}}, {"timeouts": {"connect": "4999ms", "request": "5s"}},
                  {"timeouts": {"connect": "9999ms"}}],
    ),
    # --- circuit breaker, fallback ------------------------------------------------------
    rule(
        "error-rate-one-window", "spec.circuitBreaker.errorRate", "set exactly one of window or windowCalls",
        refused=[{"circuitBreaker": {"errorRate": {}}}, {"circuitBreaker": {"errorRate": {"window": "10s", "windowCalls": 10}}}],
        accepted=[{"circuitBreaker": {"errorRate": {"window": "10s"}}}, {"circuitBreaker": {"errorRate": {"windowCalls": 1}}}],
    ),
    rule(
        "slow-call-threshold-needs-duration", "spec.circuitBreaker.errorRate", "slowCallRateThreshold needs slowCallDuration",
        refused=[{"circuitBreaker": {"errorRate": {"windowCalls": 10, "slowCallRateThreshold": 50}}}],
        accepted=[{"circuitBreaker": {"errorRate": {"windowCalls": 10, "slowCallRateThreshold": 50, "slowCallDuration": "1s"}}},
                  {"circuitBreaker": {"errorRate": {"windowCalls": 10, "slowCallDuration": "1s"}}}],
    ),
    rule(
        "error-rate-window", "spec.circuitBreaker.errorRate", "window must be from 1s to 10m",
        refused=[Refused({"circuitBreaker": {"errorRate": {"window": "999ms"}}}, "window (999ms) must be from 1s to 10m"),
                 Refused({"circuitBreaker": {"errorRate": {"window": "10m1ms"}}}, "window (600001ms) must be from 1s to 10m")],
        accepted=[{"circuitBreaker": {"errorRate": {"window": "1s"}}}, {"circuitBreaker": {"errorRate": {"window": "10m"}}}],
    ),
    rule(
        "error-rate-slow-call", "spec.circuitBreaker.errorRate", "slowCallDuration must be from 1ms to 1h",
        refused=[Refused({"circuitBreaker": {"errorRate": {"windowCalls": 10, "slowCallDuration": "1h1ms"}}},
                         "slowCallDuration (3600001ms) must be from 1ms to 1h")],
        accepted=[{"circuitBreaker": {"errorRate": {"windowCalls": 10, "slowCallDuration": "1ms"}}},
                  {"circuitBreaker": {"errorRate": {"windowCalls": 10, "slowCallDuration": "1h"}}}],
    ),
    rule(
        "error-rate-wait-in-open", "spec.circuitBreaker.errorRate", "waitInOpen must be from 1s to 1h",
        refused=[Refused({"circuitBreaker": {"errorRate": {"windowCalls": 10, "waitInOpen": "999ms"}}}, "waitInOpen (999ms) must be from 1s to 1h"),
                 Refused({"circuitBreaker": {"errorRate": {"windowCalls": 10, "waitInOpen": "61m"}}}, "waitInOpen (61m) must be from 1s to 1h")],
        accepted=[{"circuitBreaker": {"errorRate": {"windowCalls": 10, "waitInOpen": "1s"}}},
                  {"circuitBreaker": {"errorRate": {"windowCalls": 10, "waitInOpen": "1h"}}}],
    ),
    rule(
        "fallback-one-kind", "spec.fallback", "set exactly one of response, backend, circuitOpen",
        refused=[
            Refused({"circuitBreaker": {"errorRate": {"windowCalls": 10}}, "fallback": {}}, "(got none)"),
            Refused({"circuitBreaker": {"errorRate": {"windowCalls": 10}}, "fallback": {"circuitOpen": True, "response": {}}},
                    "(got ['response', 'circuitOpen'])"),
        ],
        accepted=[{"circuitBreaker": {"errorRate": {"windowCalls": 10}}, "fallback": {"response": {}}},
                  {"circuitBreaker": {"errorRate": {"windowCalls": 10}}, "fallback": {"backend": one("stale")}}],
    ),
    # --- back pressure, health check, access, shield ------------------------------------
    rule(
        "back-pressure-window", "spec.backPressure", "window must be from 1s to 10m",
        refused=[Refused({"backPressure": {"window": "999ms"}}, "window (999ms) must be from 1s to 10m"),
                 Refused({"backPressure": {"window": "10m1ms"}}, "window (600001ms) must be from 1s to 10m")],
        accepted=[{"backPressure": {"window": "1s"}}, {"backPressure": {"window": "10m"}}, {"backPressure": {}}],
    ),
    rule(
        "health-check-timeout", "spec.healthCheck", "timeout must not exceed interval",
        refused=[Refused({"healthCheck": {"path": "/h", "interval": "1s", "timeout": "1001ms"}},
                         "healthCheck.timeout (1001ms) must not exceed healthCheck.interval (1s)"),
                 Refused({"healthCheck": {"path": "/h", "timeout": "5001ms"}}, "(5001ms) must not exceed healthCheck.interval (5s)"),
                 Refused({"healthCheck": {"path": "/h", "interval": "999ms"}}, "(1s) must not exceed healthCheck.interval (999ms)")],
        accepted=[{"healthCheck": {"path": "/h", "interval": "2s", "timeout": "2s"}}, {"healthCheck": {"path": "/h"}},
                  {"healthCheck": {"path": "/h", "timeout": "5s"}}, {"healthCheck": {"path": "/h", "interval": "1s"}}],
    ),
    rule(
        "access-listed", "spec.access", "access: set allow or deny (or both)",
        refused=[{"access": {}}, {"access": {"allow": [], "deny": []}}],
        accepted=[{"access": {"deny": ["10.0.0.0/8"]}}, {"access": {"allow": ["2001:db8::/32"], "deny": []}}],
    ),
    rule(
        "shield-burst", "spec.shield", "burst must be at least requestsPerSecond",
        refused=[Refused({"shield": {"requestsPerSecond": 10, "burst": 9}}, "burst (9) must be at least requestsPerSecond (10)")],
        accepted=[{"shield": {"requestsPerSecond": 10, "burst": 10}}, {"shield": {"requestsPerSecond": 10}}],
    ),
    # --- cache, waiting room, validation ------------------------------------------------
    rule(
        "cache-ttl", "spec.cache", "ttl must be from 1s to 24h",
        refused=[Refused({**CACHE_OK, "cache": {"ttl": "999ms"}}, "ttl (999ms) must be from 1s to 24h"),
                 Refused({**CACHE_OK, "cache": {"ttl": "24h1ms"}}, "ttl (86400001ms) must be from 1s to 24h")],
        accepted=[{**CACHE_OK, "cache": {"ttl": "1s"}}, {**CACHE_OK, "cache": {"ttl": "24h"}}, {**CACHE_OK, "cache": {"ttl": "23h60m"}}],
    ),
    rule(
        "waiting-room-ticket-ttl", "spec.waitingRoom", "ticketTtl must be from 5s to 1h",
        refused=[Refused({"waitingRoom": {"admitPerSecond": 1, "maxWaiting": 1, "ticketTtl": "4999ms"}}, "ticketTtl (4999ms) must be from 5s to 1h"),
                 Refused({"waitingRoom": {"admitPerSecond": 1, "maxWaiting": 1, "ticketTtl": "61m"}}, "ticketTtl (61m) must be from 5s to 1h")],
        accepted=[{"waitingRoom": {"admitPerSecond": 1, "maxWaiting": 1, "ticketTtl": "5s"}},
                  {"waitingRoom": {"admitPerSecond": 1, "maxWaiting": 1, "ticketTtl": "1h"}},
                  {"waitingRoom": {"admitPerSecond": 1, "maxWaiting": 1}}],
    ),
    rule(
        "validate-something", "spec.validate", "give headers, query or body",
        refused=[{"validate": {}}, {"validate": {"headers": [], "query": []}}],
        accepted=[{"validate": {"body": {"allowedFields": ["a"]}}}, {"validate": {"query": [{"name": "q"}], "headers": []}},
                  {"validate": {"headers": [{"name": "x-a"}]}}],
    ),
    rule(
        "query-string-keywords", "spec.validate.query[]", "enum, pattern and format apply to type string",
        refused=[
            Refused({"validate": {"query": [{"name": "q", "type": "integer", "enum": ["1"]}]}}, "enum, pattern and format apply to type string, not integer"),
            Refused({"validate": {"query": [{"name": "a"}, {"name": "q", "type": "boolean", "pattern": "^t"}]}}, "not boolean"),
            Refused({"validate": {"query": [{"name": "q", "type": "number", "format": "uuid"}]}}, "not number"),
        ],
        accepted=[{"validate": {"query": [{"name": "q", "enum": ["a"]}]}},
                  {"validate": {"query": [{"name": "q", "type": "string", "pattern": "^a$", "format": "email"}]}}],
    ),
    rule(
        "query-number-bounds", "spec.validate.query[]", "minimum and maximum apply to type integer or number",
        refused=[
            Refused({"validate": {"query": [{"name": "q", "minimum": 1}]}}, "minimum and maximum apply to type integer or number, not string"),
            Refused({"validate": {"query": [{"name": "q", "type": "boolean", "maximum": 1}]}}, "not boolean"),
        ],
        accepted=[{"validate": {"query": [{"name": "q", "type": "integer", "minimum": 1}]}},
                  {"validate": {"query": [{"name": "q", "type": "number", "minimum": 0.5, "maximum": 2.5}]}}],
    ),
]


@dataclass(frozen=True)
class Case:
    id: str
    rule: Rule
    spec: Spec
    refused: bool
    python: str


CASES = [
    *(Case(f"{r.name}-refused-{n}", r, spec_of(x.spec), True, x.python or r.message) for r in TABLE for n, x in enumerate(r.refused)),
    *(Case(f"{r.name}-accepted-{n}", r, spec_of(spec), False, "") for r in TABLE for n, spec in enumerate(r.accepted)),
]


def crd_rules(crd: dict[str, Any]) -> list[tuple[str, str]]:
    """(schema path, message) of every x-kubernetes-validations rule under the Route's spec."""
    found: list[tuple[str, str]] = []

    def walk(node: dict[str, Any], path: str) -> None:
        found.extend((path, r["message"]) for r in node.get("x-kubernetes-validations", []))
        for name, child in (node.get("properties") or {}).items():
            walk(child, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}{{}}")

    walk(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"], "spec")
    return found


RULES = crd_rules(custom_resource_definition())


def document(case: Case) -> dict[str, Any]:
    name = re.sub(r"[^a-z0-9-]", "-", case.id.lower())[:63].strip("-")
    return {"apiVersion": "gatehouse.io/v1alpha1", "kind": "Route", "metadata": {"name": name, "namespace": NAMESPACE}, "spec": case.spec}


def test_every_cel_rule_has_cases() -> None:
    """Each rule of the generated CRD has a refused and an accepted row; each row names a rule it has."""
    assert len(RULES) == len(set(RULES)), "two rules share a path and message: the table could not tell them apart"
    table = {r.key: r for r in TABLE}
    assert len(table) == len(TABLE), "two rows name the same rule"
    missing = [f"{path}: {message}" for path, message in RULES if (path, message) not in table]
    assert not missing, "CEL rules with no parity case in TABLE (add a refused and an accepted document):\n" + "\n".join(missing)
    stale = [f"{r.path}: {r.message}" for r in TABLE if r.key not in RULES]
    assert not stale, "TABLE rows for rules the generated CRD does not have:\n" + "\n".join(stale)
    assert all(r.refused and r.accepted for r in TABLE)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_python_judges_the_case(case: Case) -> None:
    """The control plane's judgement of the object (as the Kubernetes source runs it)."""
    route, problems = parse_object(document(case))
    if not case.refused:
        assert route is not None and not problems, [str(p) for p in problems]
        return
    assert route is None and len(problems) == 1, [str(p) for p in problems]
    (problem,) = problems
    # A cross-field check names its field first ("fallback: ..."), and the loader moves that
    # into the field path: what a user reads is both.
    assert case.python in f"{problem.field}: {problem.reason}", str(problem)
    assert re.sub(r"\[\d+\]", "[]", problem.field).startswith(case.rule.path), (problem.field, case.rule.path)


# --- the API server -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPIServer]:
    server = KubeAPIServer.start(tmp_path_factory.mktemp("kube"))
    try:
        server.kubectl("apply", "-f", "-", input=render_crd())  # the CRD generated from the model, as the chart holds it
        server.wait_established("routes.gatehouse.io")
        yield server
    finally:
        server.stop()


def server_verdict(api: KubeAPIServer, doc: dict[str, Any]) -> tuple[bool, list[tuple[str, str]], list[str]]:
    """(stored, the CEL rules the API server names, its other complaints) for a dry-run create."""
    status, body = api.request("POST", f"/apis/gatehouse.io/v1alpha1/namespaces/{NAMESPACE}/routes?dryRun=All", doc, timeout=30.0)
    if status == 201:
        return True, [], []
    assert status == 422 and isinstance(body, dict), (status, body)
    fired: list[tuple[str, str]] = []
    other: list[str] = []
    for cause in body.get("details", {}).get("causes", []):
        path, text = re.sub(r"\[\d+\]", "[]", cause.get("field", "")), cause.get("message", "")
        named = [(p, m) for p, m in RULES if p == path and text.endswith(f": {m}")]
        if named:
            fired.extend(named)
        else:
            other.append(f"{cause.get('field')}: {text}")
    return False, fired, other


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_api_server_judges_the_case(api: KubeAPIServer, case: Case) -> None:
    """The real API server with the generated CRD: refuses by exactly this rule, or stores."""
    stored, fired, other = server_verdict(api, document(case))
    if case.refused:
        assert not stored, "the API server stored a document the rule refuses"
        assert (fired, other) == ([case.rule.key], []), f"expected only {case.rule.key}; fired {fired}, other {other}"
    else:
        assert stored, f"the API server refused an edge the rule allows: fired {fired}, other {other}"


# --- every combination, for the rules about which fields are set --------------------------

ABSENT = object()
COMBINATIONS: dict[str, tuple[Callable[[Spec], Spec], dict[str, list[Any]]]] = {
    # feature: (where the fields go in a spec, each field's values: ABSENT or a value)
    "match": (lambda m: {"match": m}, {"path": [ABSENT, "/a"], "pathPrefix": [ABSENT, "/a"], "pathRegex": [ABSENT, "/a"],
                                       "methods": [ABSENT, [], ["GET"]], "otherMethods": [ABSENT, "fallThrough", "reject"]}),
    "match.headers": (lambda h: {"match": {"pathPrefix": "/p", "headers": [{"name": "x-a", **h}]}},
                      {"exact": [ABSENT, "1"], "prefix": [ABSENT, "1"], "regex": [ABSENT, "^1"], "present": [ABSENT, False]}),
    "rewrite": (lambda r: {"rewrite": r}, {"prefix": [ABSENT, "/q"], "regex": [ABSENT, "^/p"], "substitution": [ABSENT, "/r"]}),
    "circuitBreaker.errorRate": (lambda e: {"circuitBreaker": {"errorRate": e}},
                                 {"window": [ABSENT, "10s"], "windowCalls": [ABSENT, 10], "slowCallRateThreshold": [ABSENT, 50],
                                  "slowCallDuration": [ABSENT, "1s"]}),
    "fallback": (lambda f: {"circuitBreaker": {"errorRate": {"windowCalls": 10}}, "fallback": f},
                 {"response": [ABSENT, {}], "backend": [ABSENT, one("stale")], "circuitOpen": [ABSENT, True]}),
    "access": (lambda a: {"access": a}, {"allow": [ABSENT, [], ["10.0.0.0/8"]], "deny": [ABSENT, [], ["10.1.0.0/16"]]}),
    "auth.consumers": (lambda c: {"auth": {"apiKeys": True, "consumers": c}}, {"allow": [ABSENT, [], ["a"]], "deny": [ABSENT, [], ["b"]]}),
}


def combinations(feature: str) -> Iterator[Spec]:
    place, options = COMBINATIONS[feature]
    for values in itertools.product(*options.values()):
        yield spec_of(place({k: v for k, v in zip(options, values) if v is not ABSENT}))


@pytest.mark.parametrize("feature", list(COMBINATIONS))
def test_both_sides_agree_on_every_combination_of_set_fields(api: KubeAPIServer, feature: str) -> None:
    """For the fields the presence rules read (exactly one of, needs, excludes, any listed),
    every combination set or unset (empty or not, for lists): stored by the API server
    exactly when Python accepts it."""
    verdicts = []
    for n, spec in enumerate(combinations(feature)):
        case = Case(f"{feature}-{n}", TABLE[0], spec, False, "")
        python_ok = parse_object(document(case))[0] is not None
        server_ok, fired, other = server_verdict(api, document(case))
        verdicts.append((python_ok, server_ok, spec, fired, other))
    differ = [(spec, f"python {'accepts' if p else 'refuses'}", fired, other) for p, s, spec, fired, other in verdicts if p != s]
    assert not differ, differ
    assert {p for p, *_ in verdicts} == {True, False}, "every combination judged the same: the test would show nothing"
