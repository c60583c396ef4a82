"""Global rate limiting through real Envoy: exact mode, hybrid mode and the 429 path, beside
Envoy with no rate-limit call, all measured in the same run with ``wrk``.

One stack: Redis, ``python -m gatehouse ratelimit`` (policies from the control plane over
xDS, ``hybrid: {maxBatch: N}``), the control plane (``rateLimit.address`` points at it),
Envoy (``--concurrency 1``, the harness's setting) and one echo upstream (Python/aiohttp).
Six routes, all with ``auth.required: false`` (no ext_authz in this stack):

    /open/direct    disabled: {status: 200}, no rateLimits        (Envoy's ceiling)
    /open/echo      proxied to the echo upstream, no rateLimits   (baseline: no rate-limit call)
    /rl/exact       proxied, one limit far above the rate, mode: exact   (one Redis script per decision)
    /rl/hybrid      proxied, the same limit, mode: hybrid                 (batched reservations)
    /deny/exact     proxied, limit 1 per hour, mode: exact    (429 after the first request)
    /deny/hybrid    proxied, limit 1 per hour, mode: hybrid   (429; the denial is remembered locally)

Envoy's ratelimit filter only runs on proxied routes (a ``disabled`` route has no route
action), so the limited routes are compared with ``/open/echo``. Every request carries the
same ``x-tenant`` header and every limit is keyed on it (``--key``): one hot key at a
steady rate, the case the issue's aim (hybrid ≤ 0.05 Redis calls per decision) is about.

Each scenario is one ``wrk --latency`` run of ``--duration``. For each: requests/s, latency
percentiles, decisions (``gatehouse_ratelimit_hits_total`` deltas), Redis calls per decision
as ratelimit_svc counts them (``gatehouse_ratelimit_redis_calls_total`` deltas by op) and as
Redis counts them (``INFO commandstats`` deltas), CPU per decision of the ratelimit_svc
process and of Redis (utime+stime from /proc/<pid>/stat, all threads), and Envoy's,
the upstream's and wrk's CPU per request.

Two more measurements answer "grpc.aio or our code?":
- ``trivial_grpc_echo``: a second gateway whose rate-limit service is a trivial grpc.aio
  servicer (same server options, returns a constant OK): bare grpcio's CPU per decision;
- ``service_in_process``: ``RateLimitService.ShouldRateLimit`` called directly in this
  process (a ``Limiter`` on the same Redis, the same algorithm and maxBatch), plus request
  parsing and response serialization, and ``Limiter.hit`` alone: our own CPU µs per
  decision (``time.process_time``: Redis's own time is not in it), no gRPC.
``cpu_per_decision_decomposition`` puts the three side by side.

``--peer`` adds the reference implementation, envoyproxy/ratelimit (Go, built by
``scripts/build-ratelimit-peer``, started by ``bench/kit/ratelimit_peer.py``), on the same Redis
behind a third gateway that is the same as the first (same routes, the same Envoy config)
except for its rate-limit cluster's address. The peer's config matches the descriptor
Envoy sends for each route, ``[limit=default/<route>#0, <key kind>=<value>]``, with the
same limit: 10^8 per minute (nothing denied) and, on the deny routes, 1 per hour (every
request but the first denied, as ours). Its scenarios run the same wrk command on the same
paths (``peer_echo`` = ``/rl/exact``, ``peer_deny`` = ``/deny/exact``; ``peer_open_echo`` is
that gateway with no rate-limit call, to show the two gateways are alike). Decisions are
Envoy's ratelimit filter counters (the peer exports no stats here); Redis round trips are
Redis's INCRBY count (one pipelined INCRBY+EXPIRE per decision). ``peer_comparison`` and
``peer_aim`` compare decisions per CPU second of the limiter process (and of Redis) with ours.

``--peer`` (or ``--http-check``) also adds a third limiter, **the HTTP check**: ``gatehouse
ext-authz`` (workers: 1) deciding the same routes' limits over Envoy's HTTP ext_authz
protocol (``extAuthz.publicRouteLimits``, the default: the second ext_authz filter
``gatehouse.public_route_limits``, policy ``auth.public``), with the same limiter engine,
Lua scripts, Redis, counter keys, algorithm, limits and maxBatch, behind a fourth gateway
whose control plane has ``extAuthz: {protocol: http, forwardHeaders: [<key header>]}`` and
``rateLimit: {address: 127.0.0.1:1}`` (limits enforced, ratelimit_svc never called: the bench
warns if Envoy's ratelimit filter counts anything there). Its scenarios, ``http_*``, run the
same wrk command on the same paths; decisions are ext_authz's ``gatehouse_ratelimit_hits_total``
deltas, CPU is utime+stime of the ext_authz process tree.

``--profile-dir`` adds a py-spy ``--native`` profile of ratelimit_svc during an extra,
unmeasured-for-the-table run of each ``--profile-scenarios`` scenario (``profiled_runs``).

    .venv/bin/python -m bench.ratelimit                          # all scenarios, 10 s each, ~80 s
    .venv/bin/python -m bench.ratelimit --peer --algorithm fixedWindow  # + envoyproxy/ratelimit and the HTTP check, ~3 min
    .venv/bin/python -m bench.ratelimit --quick                  # 4 s each, ~35 s
    .venv/bin/python -m bench.ratelimit --scenarios open_echo,exact_echo,hybrid_echo --max-batch 20

One JSON document goes to stdout; progress to stderr. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import redis

from bench.kit import profiler
from bench.kit.machine import command_output, describe
from bench.kit.metrics import authz_decisions as decisions_of, delta, samples
from bench.kit.processes import (
    CpuWindow, context_switches, cpu_seconds, cpu_times, machine_costs, process_tree, request_costs, tree_context_switches, tree_cpu_times,
)
from bench.kit.ratelimit_peer import (
    BUILD_SCRIPT as PEER_BUILD_SCRIPT,
    DEFAULT_LOCAL_CACHE_BYTES as PEER_LOCAL_CACHE_BYTES,
    DEFAULT_PIPELINE_WINDOW as PEER_PIPELINE_WINDOW,
    PeerDescriptor,
    RatelimitPeer,
    peer_binary,
)
from bench.kit.run import Bench, Progress, Run, Scenario, add_workdir_arguments, chosen
from bench.kit.stats import ratio
from bench.kit.wrk import LUA_DONE, add_wrk_arguments, check_wrk_arguments, require_wrk, run_wrk, wrk_command, wrk_settings
from tests.harness.ext_authz import ExtAuthzProcess
from tests.harness.gateway import GatewayStack
from tests.harness.issuer import TestIssuer
from tests.harness.ports import free_port
from tests.harness.processes import ManagedProcess
from tests.harness.ratelimit import RateLimitServiceProcess
from tests.harness.redis import RedisServer
from tests.harness.route_repo import route_doc

ENVOY_CONCURRENCY = 1
"""tests/harness/envoy.py starts Envoy with --concurrency 1: one worker thread."""
AIM_CALLS_PER_DECISION = 0.05
"""The issue's aim: hybrid mode makes at most this many Redis calls per decision at a steady rate."""
STEADY_LIMIT = 100_000_000
"""Requests per window on the steady-state routes: nothing is denied at any rate this machine reaches."""
STEADY_WINDOW = "60s"
DENY_WINDOW = "1h"
KEY_VALUE = "bench"
"""The one value of the limit's key every request carries (one hot key)."""
PEER_STEADY_UNIT = "minute"
"""The peer's fixed window for the steady routes: STEADY_LIMIT per minute = ours per 60s."""
PEER_DENY_UNIT = "hour"
PEER_DOMAIN = "gatehouse"
"""control_plane/translator/ratelimit.py's DOMAIN: Envoy's ratelimit filter sends it."""
PEER_KEY_PREFIX = "rlpeer:"
AIM_PEER_RATIO = 1.0
"""The project's aim: ours in hybrid mode at >= 1.0x the peer's decisions per CPU second of the limiter process."""
HTTP_CHECK = "HTTP check (gatehouse ext-authz, Envoy's HTTP ext_authz protocol)"
HTTP_CHECK_UNUSED_RATELIMIT = "127.0.0.1:1"
"""The HTTP-check gateway's ``rateLimit.address``: the block turns limits on; nothing listens there."""


progress = Progress("ratelimit")


# -- process and service readings -------------------------------------------------------


_COUNTERS = ("hits", "over_limit", "near_limit", "shadow", "reservations", "reserved_tokens", "released_tokens",
             "lapsed_tokens", "redis_calls", "redis_errors", "fallback_decisions")


class MetricsSource(Protocol):
    def metrics_text(self) -> str: ...


def ratelimit_counters(service: MetricsSource) -> Counter[str]:
    """``<limit id>|<counter>[|<label>]`` → value, for the limiter's per-limit counters
    (``gatehouse_ratelimit_<counter>_total``; ``redis_calls`` by op, errors by reason), in
    ratelimit_svc or in ext_authz (the same ``limiter/`` metrics), summed over workers."""
    counts: Counter[str] = Counter()
    for name, labels, value in samples(service.metrics_text(), "gatehouse_ratelimit_"):
        if not name.endswith("_total"):
            continue
        counter = name.removeprefix("gatehouse_ratelimit_").removesuffix("_total")
        if counter not in _COUNTERS:
            continue
        extra = labels.get("op") or labels.get("reason") or labels.get("policy")
        key = f"{labels.get('limit')}|{counter}" + (f"|{extra}" if extra else "")
        counts[key] += int(value)
    return counts


def authz_decisions(service: MetricsSource) -> Counter[str]:
    """ext_authz's ``gatehouse_authz_decisions_total`` as ``<result>|<reason>`` → value (a
    public route's admitted check is ``allow|public``; a 429 from the limits counts none)."""
    return decisions_of(service.metrics_text(), "|")


def of_limit(counts: Counter[str], limit_id: str) -> dict[str, Any]:
    """One limit's counter deltas, with Redis calls by op."""
    own = {k.split("|", 1)[1]: v for k, v in counts.items() if k.startswith(f"{limit_id}|") and v}
    calls = {k.split("|", 1)[1]: v for k, v in own.items() if k.startswith("redis_calls|")}
    rest = {k: v for k, v in own.items() if not k.startswith("redis_calls|")}
    return {**rest, "redis_calls_by_op": calls, "redis_calls": sum(calls.values())}


def commandstats(client: redis.Redis) -> dict[str, dict[str, int]]:
    """Redis's per-command counters (``INFO commandstats``): calls and usec by command.
    Commands a Lua script runs are counted too, under their own names."""
    info = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): {"calls": int(v["calls"]), "usec": int(v["usec"])} for name, v in info.items()}


def commandstats_delta(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Deltas, without this script's own ``INFO`` calls."""
    delta = {}
    for name, now in after.items():
        was = before.get(name, {"calls": 0, "usec": 0})
        calls = now["calls"] - was["calls"]
        if calls and name != "info":
            delta[name] = {"calls": calls, "usec": now["usec"] - was["usec"]}
    return dict(sorted(delta.items(), key=lambda item: -item[1]["calls"]))


def envoy_ratelimit_stats(stack: GatewayStack) -> dict[str, int]:
    """Envoy's ratelimit filter counters (``cluster.<route cluster>.ratelimit.{ok,over_limit,error,
    failure_mode_allowed}``) and the rate-limit gRPC cluster's request counters."""
    assert stack.envoy is not None
    stats = stack.envoy.stats("ratelimit")
    wanted: dict[str, int] = {}
    for name, value in stats.items():
        if ".ratelimit." in name and name.startswith("cluster.") and not name.startswith("cluster.gatehouse_ratelimit."):
            short = "filter." + name.rsplit(".ratelimit.", 1)[1]
            wanted[short] = wanted.get(short, 0) + value
        elif name.startswith("cluster.gatehouse_ratelimit.") and name.endswith(
            ("upstream_rq_total", "upstream_rq_timeout", "upstream_cx_total", ".success", ".failure", ".total")
        ):
            short = "rls_cluster." + name.removeprefix("cluster.gatehouse_ratelimit.")
            wanted[short] = value
    return wanted


def envoy_ext_authz_stats(stack: GatewayStack) -> dict[str, int]:
    """Envoy's ext_authz filter counters (``http.<prefix>.ext_authz.*``, both filters) and the
    ext_authz cluster's request count: the HTTP check was called, and how it answered."""
    assert stack.envoy is not None
    wanted: dict[str, int] = {}
    for name, value in stack.envoy.stats("ext_authz").items():
        if name.startswith("http.") and ".ext_authz." in name:
            wanted["filter." + name.split(".ext_authz.", 1)[1]] = wanted.get("filter." + name.split(".ext_authz.", 1)[1], 0) + value
        elif name.startswith("cluster.") and name.endswith(("upstream_rq_total", "upstream_rq_timeout", "upstream_rq_5xx")):
            wanted[name.removeprefix("cluster.")] = value
    return wanted


_VOLATILE_KEYS = {"last_updated", "version_info", "base_id", "restart_epoch", "admin", "bootstrap"}


def _config_leaves(value: Any, path: str = "") -> dict[str, Any]:
    """Flatten an Envoy config dump into path -> leaf, lists of named resources keyed by name."""
    out: dict[str, Any] = {}
    if isinstance(value, dict):
        for key, item in value.items():
            if key not in _VOLATILE_KEYS:
                out.update(_config_leaves(item, f"{path}.{key}" if path else key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            name = None
            if isinstance(item, dict):
                inner = item.get("cluster") or item.get("active_state", {}).get("listener") or item.get("route_config") or item
                name = inner.get("name") if isinstance(inner, dict) else None
            out.update(_config_leaves(item, f"{path}[{name or index}]"))
    else:
        out[path] = value
    return out


def envoy_config_diff(a: GatewayStack, b: GatewayStack) -> list[str]:
    """Where two gateways' Envoy configs differ (listeners, routes, clusters with endpoints):
    the paths and both values, without timestamps and versions."""
    assert a.envoy is not None and b.envoy is not None
    left, right = (_config_leaves(s.envoy.config_dump(include_eds=True)) for s in (a, b))  # type: ignore[union-attr]
    diffs = []
    for path in sorted(set(left) | set(right)):
        if left.get(path) != right.get(path):
            diffs.append(f"{path}: {left.get(path)!r} != {right.get(path)!r}")
    return diffs


# -- scenarios --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class LimitScenario(Scenario):
    route: str | None = None
    """The route whose limit this scenario exercises (its limit id is ``default/<route>#0``)."""
    trivial: bool = False
    """Run against the second stack, whose rate-limit service is a trivial grpc.aio servicer (returns OK)."""
    peer: bool = False
    """Run against the peer stack, whose rate-limit service is envoyproxy/ratelimit (``--peer``)."""
    http: bool = False
    """Run against the HTTP-check stack: ext_authz over HTTP decides the route's limits (``--http-check``)."""

    @property
    def limit_id(self) -> str | None:
        """The limit id in the descriptor Envoy sends for this route (the peer's config matches it too)."""
        return f"default/{self.route}#0" if self.route else None

    @property
    def ours(self) -> bool:
        """ratelimit_svc decides this scenario's requests."""
        return self.route is not None and not self.peer and not self.trivial and not self.http

    @property
    def http_check(self) -> bool:
        """The HTTP check (ext_authz) decides this scenario's requests."""
        return self.route is not None and self.http

    @property
    def calls_service(self) -> bool:
        return self.route is not None or self.trivial

    @property
    def stack_name(self) -> str:
        return "trivial" if self.trivial else "peer" if self.peer else "http" if self.http else "main"


SCENARIOS = [
    LimitScenario("open_direct", "/open/direct", "Envoy direct response, no rateLimits: Envoy's ceiling"),
    LimitScenario("open_echo", "/open/echo", "proxied to the echo upstream, no rateLimits: the baseline (no rate-limit call)"),
    LimitScenario("exact_echo", "/rl/exact", "proxied, one limit far above the rate, mode exact: one Redis script per decision", route="rl-exact"),
    LimitScenario("hybrid_echo", "/rl/hybrid", "proxied, the same limit, mode hybrid: decisions from local tokens, batched reservations", route="rl-hybrid"),
    LimitScenario("exact_deny", "/deny/exact", "limit 1 per hour, mode exact: 429, every decision asks Redis", 429, route="deny-exact"),
    LimitScenario("hybrid_deny", "/deny/hybrid", "limit 1 per hour, mode hybrid: 429, the denial is remembered until Redis said a hit could pass", 429, route="deny-hybrid"),
    LimitScenario("trivial_grpc_echo", "/rl/exact", "the same route, but Envoy's rate-limit service is a trivial grpc.aio servicer that returns OK: bare grpcio's cost", trivial=True),
    LimitScenario("peer_open_echo", "/open/echo", "the peer gateway, no rateLimits: its baseline (the same as open_echo if the two gateways are alike)", peer=True),
    LimitScenario("peer_echo", "/rl/exact", "the same route and descriptor on the peer gateway: envoyproxy/ratelimit, fixed window 10^8 per minute, "
             "one pipelined INCRBY+EXPIRE per decision", route="rl-exact", peer=True),
    LimitScenario("peer_deny", "/deny/exact", "the same deny route on the peer gateway: 1 per hour, 429; over-limit keys answered from the peer's local cache",
             429, route="deny-exact", peer=True),
]
HTTP_SCENARIOS = [
    LimitScenario("http_open_echo", "/open/echo", "the HTTP-check gateway, no rateLimits: its baseline (no ext_authz call on a public route "
             "without limits)", http=True),
    LimitScenario("http_exact_echo", "/rl/exact", "the same route on the HTTP-check gateway: ext_authz over HTTP decides the limit "
             "(auth.public, no token), mode exact: one Redis script per decision", route="rl-exact", http=True),
    LimitScenario("http_hybrid_echo", "/rl/hybrid", "the same route on the HTTP-check gateway, mode hybrid: local tokens, batched reservations",
             route="rl-hybrid", http=True),
    LimitScenario("http_exact_deny", "/deny/exact", "the deny route on the HTTP-check gateway, mode exact: 429, every decision asks Redis",
             429, route="deny-exact", http=True),
    LimitScenario("http_hybrid_deny", "/deny/hybrid", "the deny route on the HTTP-check gateway, mode hybrid: 429 from the remembered denial",
             429, route="deny-hybrid", http=True),
]
SCENARIOS += HTTP_SCENARIOS
BY_NAME = {s.name: s for s in SCENARIOS}
PEER_ORDER = ("open_direct", "open_echo", "peer_open_echo", "http_open_echo", "exact_echo", "hybrid_echo", "http_exact_echo",
              "http_hybrid_echo", "peer_echo", "exact_deny", "hybrid_deny", "http_exact_deny", "http_hybrid_deny", "peer_deny",
              "trivial_grpc_echo")
"""Default order with ``--peer``: per kind, ratelimit_svc's scenarios, then the HTTP check's, then the peer's."""
HTTP_COUNTERPART = {"http_exact_echo": "exact_echo", "http_hybrid_echo": "hybrid_echo", "http_exact_deny": "exact_deny",
                    "http_hybrid_deny": "hybrid_deny", "http_open_echo": "open_echo"}
"""The ratelimit_svc scenario on the same path, for the HTTP check's ratios to ours."""


def limit_doc(args: argparse.Namespace, mode: str, *, deny: bool) -> dict[str, Any]:
    """One rateLimits entry: far above any rate (steady state), or 1 per hour (deny)."""
    doc: dict[str, Any] = {"key": args.key, "algorithm": args.algorithm, "mode": mode}
    if args.algorithm == "tokenBucket":
        doc.update({"capacity": 1, "refill": "1/1h"} if deny else {"capacity": STEADY_LIMIT, "refill": f"{STEADY_LIMIT}/{STEADY_WINDOW}"})
    else:
        doc.update({"limit": 1, "window": DENY_WINDOW} if deny else {"limit": STEADY_LIMIT, "window": STEADY_WINDOW})
    return doc


def routes(args: argparse.Namespace) -> list[dict[str, Any]]:
    backend = [{"service": "svc-a", "port": 8080}]
    public = {"required": False}

    def limited(name: str, path: str, mode: str, *, deny: bool) -> dict[str, Any]:
        return route_doc(name, {"match": {"pathPrefix": path}, "backends": backend, "auth": public,
                                "rateLimits": [limit_doc(args, mode, deny=deny)]})

    return [
        route_doc("open-direct", {"match": {"pathPrefix": "/open/direct"}, "disabled": {"status": 200, "body": "ok"}, "auth": public}),
        route_doc("open-echo", {"match": {"pathPrefix": "/open/echo"}, "backends": backend, "auth": public}),
        limited("rl-exact", "/rl/exact", "exact", deny=False),
        limited("rl-hybrid", "/rl/hybrid", "hybrid", deny=False),
        limited("deny-exact", "/deny/exact", "exact", deny=True),
        limited("deny-hybrid", "/deny/hybrid", "hybrid", deny=True),
    ]


def descriptor_key(args: argparse.Namespace) -> str:
    """The second entry's key in the descriptor Envoy sends (control_plane/translator/ratelimit.py)."""
    return "remote_address" if args.key == "ip" else args.key


def peer_descriptors(args: argparse.Namespace) -> list[PeerDescriptor]:
    """The peer's config for the four limited routes, matching Envoy's two-entry descriptors:
    ``limit=<limit id>`` with the key kind nested below it (no value: one counter per value,
    as ours). The same limits as ours, in the peer's units: 10^8 per minute, 1 per hour."""
    key = descriptor_key(args)
    out = []
    for route, deny in (("rl-exact", False), ("rl-hybrid", False), ("deny-exact", True), ("deny-hybrid", True)):
        limit = PeerDescriptor(key, 1 if deny else STEADY_LIMIT, PEER_DENY_UNIT if deny else PEER_STEADY_UNIT)
        out.append(PeerDescriptor("limit", None, value=f"default/{route}#0", descriptors=(limit,)))
    return out


def key_header(args: argparse.Namespace) -> tuple[str, str] | None:
    """The request header that carries the limit's key (none for ``ip``: the client address is the key)."""
    if args.key.startswith("header:"):
        return args.key.removeprefix("header:"), KEY_VALUE
    if args.key == "apiKey":
        return "x-api-key", KEY_VALUE
    return None


# -- the service alone, in this process -------------------------------------------------


def rate_limit_request(limit_id: str, descriptor_key: str, value: str) -> bytes:
    """A serialized RateLimitRequest shaped like Envoy's for one limit of a route."""
    from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
    from envoy.service.ratelimit.v3 import rls_pb2

    request = rls_pb2.RateLimitRequest(domain="gatehouse")
    request.descriptors.append(ratelimit_pb2.RateLimitDescriptor(entries=[
        ratelimit_pb2.RateLimitDescriptor.Entry(key="limit", value=limit_id),
        ratelimit_pb2.RateLimitDescriptor.Entry(key=descriptor_key, value=value),
    ]))
    return bytes(request.SerializeToString())


async def _service_cost(args: argparse.Namespace, redis_url: str, n: int) -> dict[str, Any]:
    """CPU (and wall) µs per decision of ``RateLimitService.ShouldRateLimit`` and of
    ``Limiter.hit``, awaited one after another in this process (no gRPC), with a Limiter on
    the bench's Redis and the service's settings (Redis timeout 50 ms, the same maxBatch).
    Each case has its own limit id, so the counters of the routes measured through Envoy
    are not touched."""
    from envoy.service.ratelimit.v3 import rls_pb2

    from limiter.hybrid import HybridSettings
    from limiter.engine import Limiter
    from limiter.model import LimitSpec
    from ratelimit_svc.service import PolicyTable, RateLimitService

    def spec(name: str, mode: str, deny: bool) -> LimitSpec:
        window_ms = 3_600_000 if deny else 60_000
        limit = 1 if deny else STEADY_LIMIT
        refill = (1 if deny else STEADY_LIMIT) if args.algorithm == "tokenBucket" else 0
        return LimitSpec(id=f"bench/in-process-{name}#0", algorithm=args.algorithm, limit=limit, window_ms=window_ms,
                         refill_tokens=refill, mode=mode)  # type: ignore[arg-type]

    specs = {"exact": spec("exact", "exact", False), "hybrid": spec("hybrid", "hybrid", False),
             "exact_deny": spec("exact-deny", "exact", True), "hybrid_deny": spec("hybrid-deny", "hybrid", True)}
    descriptor_key = "remote_address" if args.key == "ip" else args.key
    value = "127.0.0.1" if args.key == "ip" else KEY_VALUE
    limiter = Limiter(url=redis_url, timeout=0.05, hybrid=HybridSettings(max_batch=args.max_batch))
    table = PolicyTable()
    table.replace({s.id: s for s in specs.values()}, {s.id: args.key for s in specs.values()})
    service = RateLimitService(limiter, table)
    parse = rls_pb2.RateLimitRequest.FromString
    results: dict[str, Any] = {}

    async def timed(count: int, call: Any, *args: Any) -> tuple[float, float, int, list[Any]]:
        """(wall s, this process's CPU s, Redis calls, answers) of ``count`` sequential ``await call(*args)``."""
        calls, answers = limiter.redis.calls, []
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(count):
            answers.append(await call(*args))
        return time.perf_counter() - wall, time.process_time() - cpu, limiter.redis.calls - calls, answers

    try:
        for name, limit in specs.items():
            blob = rate_limit_request(limit.id, descriptor_key, value)
            request = parse(blob)
            key = f"{descriptor_key}={value}"
            for _ in range(min(200, n)):  # scripts loaded, connections open, the deny case past its one admission
                await service.ShouldRateLimit(request, None)
            started = time.process_time()
            for _ in range(n):
                parse(blob)
            parse_s = time.process_time() - started
            service_wall, service_cpu, service_calls, responses = await timed(n, service.ShouldRateLimit, request, None)
            started = time.process_time()
            for response in responses:
                response.SerializeToString()
            serialize_s = time.process_time() - started
            hit_wall, hit_cpu, hit_calls, _ = await timed(n, limiter.hit, limit, key)
            codes = Counter(rls_pb2.RateLimitResponse.Code.Name(r.overall_code) for r in responses)
            results[name] = {
                "n": n,
                "ShouldRateLimit_cpu_us": round(service_cpu * 1e6 / n, 1),
                "ShouldRateLimit_wall_us": round(service_wall * 1e6 / n, 1),
                "parse_request_cpu_us": round(parse_s * 1e6 / n, 2),
                "serialize_response_cpu_us": round(serialize_s * 1e6 / n, 2),
                "total_cpu_us": round((parse_s + service_cpu + serialize_s) * 1e6 / n, 1),
                "Limiter_hit_cpu_us": round(hit_cpu * 1e6 / n, 1),
                "Limiter_hit_wall_us": round(hit_wall * 1e6 / n, 1),
                "redis_calls_per_decision": round((service_calls + hit_calls) / (2 * n), 4),
                "codes": dict(codes),
            }
        return results
    finally:
        await limiter.close()


# -- profile ----------------------------------------------------------------------------


PROFILE_CATEGORIES: list[tuple[str, tuple[str, ...]]] = [
    ("gc", ("gc_collect",)),
    ("protobuf", ("google/protobuf", "_message.", "upb", "envoy/service/", "envoy/extensions/", "envoy/config/")),
    ("metrics", ("prometheus_client/",)),
    ("logging", ("structlog/", "logging/")),
    ("redis_py", ("redis/asyncio", "redis/_parsers", "redis/connection", "redis/client", "hiredis")),
    ("limiter", ("limiter/",)),
    ("service", ("ratelimit_svc/",)),
    ("grpc", ("grpc/", "cygrpc", "libgrpc")),
    ("asyncio", ("asyncio/", "_asynciomodule", "selectors.py", "selectmodule", "uvloop")),
]
"""Where a running sample's time goes: the innermost frame that names a category wins."""
_PROFILE_QUEUE_WAITS = (*profiler.QUEUE_WAITS, "pthread_cond_wait")
_PROFILE_SYSCALL_LEAVES = (*profiler.SYSCALL_LEAVES, "epoll_ctl")


def summarise_profile(path: Path) -> dict[str, Any]:
    """bench.kit.profiler.summarise_profile with ratelimit_svc's categories: how much of it is inside
    ``ShouldRateLimit`` and inside ``Limiter.hit``, and the project's functions."""
    return profiler.summarise_profile(path, PROFILE_CATEGORIES, ("inside_ShouldRateLimit", "RateLimitService.ShouldRateLimit ("),
                                   queue_waits=_PROFILE_QUEUE_WAITS, syscall_leaves=_PROFILE_SYSCALL_LEAVES,
                                   share_inside={"inside_Limiter_hit_share": "Limiter.hit (limiter/"},
                                   project=("limiter/", "ratelimit_svc/", "servicekit/"))


# -- the run ----------------------------------------------------------------------------


class LimitBench(Bench):
    def __init__(self, args: argparse.Namespace, run: Run) -> None:
        super().__init__(args, run)
        workdir = self.workdir
        self.redis: RedisServer | None = None
        self.redis_client: redis.Redis | None = None
        self.ratelimit: RateLimitServiceProcess | None = None
        self.stack: GatewayStack | None = None
        self.trivial: ManagedProcess | None = None
        self.trivial_stack: GatewayStack | None = None
        self.peer: RatelimitPeer | None = None
        self.peer_stack: GatewayStack | None = None
        self.authz: ExtAuthzProcess | None = None
        self.http_stack: GatewayStack | None = None
        self.report_lua = workdir / "report.lua"
        self.report_lua.write_text(LUA_DONE)
        self.header = key_header(args)

    # setup / teardown

    def _gateway(self, name: str, ratelimit_address: str, ext_authz: dict[str, Any] | None = None) -> GatewayStack:
        extra: dict[str, Any] = {"rateLimit": {"address": ratelimit_address, "timeout": self.args.ratelimit_timeout}}
        if ext_authz is not None:
            extra["extAuthz"] = ext_authz
        stack = self.gateway(name, routes(self.args), wait_path="/open/direct", extra=extra)
        stack.wait_status("/open/echo", 200)
        return stack

    def start(self) -> dict[str, Any]:
        started = time.monotonic()
        self.redis = self.parts.add(RedisServer.start(log_dir=self.workdir / "redis"))
        self.redis_client = redis.Redis(host=self.redis.host, port=self.redis.port)
        self.parts.on_stop(self.redis_client.close, "the Redis client")
        extra: dict[str, Any] = {"hybrid": {"maxBatch": self.args.max_batch}}
        if self.args.redis_timeout:
            extra["redis"] = {"url": self.redis.url, "timeout": self.args.redis_timeout}
        self.ratelimit = self.parts.add(RateLimitServiceProcess(self.workdir / "ratelimit", redis_url=self.redis.url, extra=extra))
        self.stack = self._gateway("stack", self.ratelimit.address)
        self.ratelimit.start(self.stack.control_plane.xds_port)
        # Until ratelimit_svc has its policies, Envoy fails open: wait for the service's headers.
        self.wait_limited(self.stack, 15, "ratelimit_svc")
        assert self.ratelimit.process is not None
        return {"start_s": round(time.monotonic() - started, 2), "ratelimit_pid": self.ratelimit.process.pid,
                "ratelimit_threads": len(list(Path(f"/proc/{self.ratelimit.process.pid}/task").iterdir()))}

    def wait_limited(self, stack: GatewayStack, timeout: float, limiter: str) -> None:
        """Until ``/rl/exact`` answers with ``x-ratelimit-limit``: the limiter has its policies."""
        deadline = time.monotonic() + timeout
        while stack.get("/rl/exact", headers=self.headers()).headers.get("x-ratelimit-limit") is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{limiter} never answered for /rl/exact (no x-ratelimit-limit header)")
            time.sleep(0.05)

    def start_trivial(self) -> None:
        """A second gateway whose rate-limit service is bench.standins.trivial's (started on first use)."""
        if self.trivial_stack is not None:
            return
        self.trivial, port = self.start_standin("trivial", "ratelimit", log_name="trivial-ratelimit")
        self.trivial_stack = self._gateway("trivial-stack", f"127.0.0.1:{port}")

    def start_peer(self) -> dict[str, Any]:
        """envoyproxy/ratelimit on the bench's Redis, and a gateway like the first whose
        rate-limit cluster points at it (the same routes, so the same descriptors)."""
        assert self.redis is not None
        started = time.monotonic()
        args = self.args
        binary = peer_binary()
        self.peer = self.parts.add(RatelimitPeer(
            redis=self.redis.url, grpc_port=free_port(), http_port=free_port(), debug_port=free_port(),
            domain=PEER_DOMAIN, descriptors=peer_descriptors(args), binary=binary, log_dir=self.workdir / "peer",
            local_cache_bytes=args.peer_local_cache_bytes, pipeline_window=args.peer_pipeline_window,
            redis_pool_size=args.peer_pool_size, cache_key_prefix=PEER_KEY_PREFIX, gomaxprocs=args.peer_gomaxprocs,
        ))
        self.peer.start()
        self.peer_stack = self._gateway("peer-stack", self.peer.grpc_address)
        assert self.peer.process is not None and self.stack is not None
        diff = envoy_config_diff(self.stack, self.peer_stack)
        env = self.peer.env()
        return {
            "start_s": round(time.monotonic() - started, 2),
            "peer_pid": self.peer.process.pid,
            "peer_binary": str(binary),
            "peer_version": peer_version(),
            "peer_env": {k: v for k, v in env.items() if k != "PATH"},
            "peer_config": self.peer.config_path.read_text(),
            "peer_loaded_config": self.peer.loaded_config(),
            "envoy_config_diff_vs_main_gateway": diff,
        }

    def http_check_extauthz(self) -> dict[str, Any]:
        """The HTTP-check gateway's control-plane ``extAuthz`` block (publicRouteLimits: its default, true)."""
        assert self.authz is not None
        block: dict[str, Any] = {"address": [self.authz.check_address], "protocol": "http"}
        if self.header is not None and self.args.key.startswith("header:"):
            block["forwardHeaders"] = [self.header[0]]  # a header: key the check must be sent (else ratelimit_svc keeps the route)
        return block

    def start_http_check(self) -> dict[str, Any]:
        """``gatehouse ext-authz`` (workers: 1) with ``http.rateLimit`` on the bench's Redis (the
        same maxBatch, Redis timeout and expectedInstances as ratelimit_svc), and a gateway like
        the first whose control plane sends public routes' limits to it over HTTP."""
        assert self.redis is not None and self.stack is not None
        started = time.monotonic()
        issuer = TestIssuer()  # ext_authz needs an issuer; no token is sent on these public routes
        jwks = issuer.write_jwks(self.workdir / "http-check-jwks.json")
        rate_limit = {"redis": {"url": self.redis.url, "timeout": self.args.redis_timeout or "50ms"}, "expectedInstances": 1,
                      "hybrid": {"maxBatch": self.args.max_batch}}
        self.authz = self.parts.add(ExtAuthzProcess(
            self.workdir / "http-check", {"issuers": [{"issuer": issuer.issuer, "audiences": [issuer.audience], "jwksFile": str(jwks)}]},
            name="ext-authz-http-check", transport="http", rate_limit=rate_limit))
        self.http_stack = self._gateway("http-stack", HTTP_CHECK_UNUSED_RATELIMIT, self.http_check_extauthz())
        self.authz.use_control_plane(self.http_stack.control_plane.xds_port)
        self.authz.start(timeout=60)
        self.wait_limited(self.http_stack, 20, "the HTTP check")
        assert self.authz.process is not None
        diff = envoy_config_diff(self.stack, self.http_stack)
        return {
            "start_s": round(time.monotonic() - started, 2),
            "ext_authz_pid": self.authz.process.pid,
            "ext_authz_process_tree": process_tree(self.authz.process.pid),
            "ext_authz_config": self.authz.config,
            "control_plane_ext_authz": self.http_check_extauthz(),
            "control_plane_rate_limit": {"address": HTTP_CHECK_UNUSED_RATELIMIT, "timeout": self.args.ratelimit_timeout},
            "envoy_config_diff_vs_main_gateway_count": len(diff),
            "envoy_config_diff_vs_main_gateway": diff[:300],
        }

    def stack_for(self, scenario: LimitScenario) -> GatewayStack | None:
        return (self.trivial_stack if scenario.trivial else self.peer_stack if scenario.peer
                else self.http_stack if scenario.http else self.stack)

    def headers(self) -> dict[str, str]:
        return {self.header[0]: self.header[1]} if self.header else {}

    def preflight(self, scenario: LimitScenario) -> None:
        """Requests of this scenario's kind before the load: right status? A deny route
        admits its first request (limit 1), so up to two are sent."""
        stack = self.stack_for(scenario)
        assert stack is not None
        for _ in range(2 if scenario.expect_status == 429 else 1):
            reply = stack.get(scenario.path, headers=self.headers())
            if reply.status == scenario.expect_status:
                break
        if reply.status != scenario.expect_status:
            raise RuntimeError(f"{scenario.name}: {scenario.path} answered {reply.status}, expected {scenario.expect_status}: {reply.body[:300]!r}")
        if (scenario.ours or scenario.http_check) and "x-ratelimit-limit" not in reply.headers:
            raise RuntimeError(f"{scenario.name}: {scenario.path} answered without x-ratelimit-limit: the limit is not in force")
        if scenario.peer and scenario.route and not self.peer_keys(scenario):
            # The peer adds no headers (Envoy's own X-RateLimit generation is off): a counter in
            # Redis proves its config matched the descriptor (an unmatched one is OK, no Redis call).
            raise RuntimeError(f"{scenario.name}: no {PEER_KEY_PREFIX}{PEER_DOMAIN}_limit_{scenario.limit_id}_* key in Redis: "
                               "the peer's config did not match Envoy's descriptor")

    def peer_keys(self, scenario: LimitScenario) -> list[str]:
        """The peer's Redis counters for this scenario's limit (one per window)."""
        assert self.redis_client is not None
        pattern = f"{PEER_KEY_PREFIX}{PEER_DOMAIN}_limit_{scenario.limit_id}_{descriptor_key(self.args)}_*"
        return sorted(k.decode() for k in self.redis_client.scan_iter(match=pattern.replace("[", "\\[")))

    # one wrk run

    def wrk(self, scenario: LimitScenario, duration: int, log_name: str) -> dict[str, Any]:
        stack = self.stack_for(scenario)
        assert stack is not None
        url = f"http://127.0.0.1:{stack.listener_port}{scenario.path}"
        argv = wrk_command(url, threads=self.args.threads, connections=self.args.connections, duration=duration, script=self.report_lua,
                           headers=(f"{self.header[0]}: {self.header[1]}",) if self.header else ())
        return run_wrk(argv, duration, self.workdir, log_name)

    def run(self, scenario: LimitScenario, *, profile_to: Path | None = None) -> dict[str, Any]:
        if scenario.trivial:
            progress("starting the second gateway (trivial grpc.aio rate-limit service)")
            self.start_trivial()
        if scenario.peer and self.peer_stack is None:
            raise RuntimeError(f"{scenario.name} needs the peer gateway (--peer)")
        if scenario.http and self.http_stack is None:
            raise RuntimeError(f"{scenario.name} needs the HTTP-check gateway (--http-check or --peer)")
        stack = self.stack_for(scenario)
        service = (self.trivial if scenario.trivial else self.peer.process if scenario.peer and self.peer
                   else self.authz.process if scenario.http and self.authz
                   else self.ratelimit.process if self.ratelimit else None)
        assert stack is not None and stack.envoy is not None and service is not None
        assert self.ratelimit is not None and self.redis is not None and self.redis.pid is not None and self.redis_client is not None
        self.preflight(scenario)
        service_pid, envoy_pid, upstream_pid, redis_pid = service.pid, stack.envoy.pid, stack.upstreams["svc-a"].pid, self.redis.pid
        # ext_authz's CPU is its process tree's (a supervisor and workers if workers > 1); the others are one process.
        def service_times() -> tuple[float, float]:
            return tree_cpu_times(service_pid) if scenario.http else cpu_times(service_pid)

        def service_switches() -> int:
            return tree_context_switches(service_pid) if scenario.http else context_switches(service_pid)

        # The other limiters stay up (idle) meanwhile: their CPU is counted apart.
        authz_process = self.authz.process if self.authz else None
        idle_pids = {name: proc.pid for name, proc in (("ratelimit_svc", self.ratelimit.process), ("peer", self.peer.process if self.peer else None),
                                                       ("trivial", self.trivial), ("http_check", authz_process))
                     if proc is not None and proc.pid != service_pid}
        idle_before = {name: sum(tree_cpu_times(pid)) for name, pid in idle_pids.items()}
        peer_keys_before = self.peer_keys(scenario) if scenario.peer and scenario.route else []
        profile_pid = service_pid
        if scenario.http and len(process_tree(service_pid)) > 1:
            profile_pid = process_tree(service_pid)[1]  # the (first) worker, not the supervisor
        sampler = profiler.Profiler(profile_pid, profile_to, self.args.profile_rate, summarise_profile) if profile_to is not None else None
        counters_before = ratelimit_counters(self.ratelimit)
        authz_counters_before = ratelimit_counters(self.authz) if self.authz else Counter()
        authz_decisions_before = authz_decisions(self.authz) if self.authz else Counter()
        ext_authz_before = envoy_ext_authz_stats(stack) if scenario.http else {}
        commands_before = commandstats(self.redis_client)
        clients_before = int(self.redis_client.info("clients")["connected_clients"])
        envoy_before = envoy_ratelimit_stats(stack)
        switches_before = service_switches()
        service_system_before = service_times()[1]
        window = CpuWindow({"service": service_pid, "envoy": envoy_pid, "upstream": upstream_pid, "redis": redis_pid},
                           trees={"service"} if scenario.http else ())
        load = self.wrk(scenario, self.args.duration, scenario.name)
        cpu = window.used()
        profile = sampler.stop() if sampler is not None else None
        switches = service_switches() - switches_before
        service_system = service_times()[1] - service_system_before
        commands = commandstats_delta(commands_before, commandstats(self.redis_client))
        clients_after = int(self.redis_client.info("clients")["connected_clients"])
        counters = ratelimit_counters(self.ratelimit) - counters_before
        authz_counters = (ratelimit_counters(self.authz) if self.authz else Counter()) - authz_counters_before
        authz_decided = (authz_decisions(self.authz) if self.authz else Counter()) - authz_decisions_before
        ext_authz_delta = delta(ext_authz_before, envoy_ext_authz_stats(stack)) if scenario.http else {}
        envoy_after = envoy_ratelimit_stats(stack)
        requests = load["requests"]
        result: dict[str, Any] = {"name": scenario.name, "path": scenario.path, "description": scenario.description,
                                  "limit_id": scenario.limit_id, "expect_status": scenario.expect_status, **load}
        result["status_as_expected"] = scenario.status_as_expected(load)
        warnings: list[str] = []
        result["stack"] = scenario.stack_name
        result["limiter"] = ("trivial grpc.aio servicer" if scenario.trivial else "envoyproxy/ratelimit" if scenario.peer
                             else HTTP_CHECK if scenario.http else "ratelimit_svc")
        envoy_delta = delta(envoy_before, envoy_after)
        limit: dict[str, Any] = {}
        if scenario.ours:
            assert scenario.limit_id is not None
            limit = of_limit(counters, scenario.limit_id)
            decisions = limit.get("hits", 0)
            result["decisions_counted_by"] = "gatehouse_ratelimit_hits_total delta"
            result["ratelimit_svc"] = limit
        elif scenario.http_check:
            assert scenario.limit_id is not None
            limit = of_limit(authz_counters, scenario.limit_id)
            decisions = limit.get("hits", 0)
            result["decisions_counted_by"] = "ext_authz's gatehouse_ratelimit_hits_total delta (the same limiter/ metrics)"
            result["http_check"] = {**limit, "authz_decisions": {k: v for k, v in authz_decided.items() if v}}
        elif scenario.trivial:
            decisions = requests  # the trivial servicer counts nothing; every request on this route is one call
            result["decisions_counted_by"] = "wrk requests (trivial servicer has no counter)"
        elif scenario.peer and scenario.route:
            # The peer runs without stats (DISABLE_STATS=true): its answers are counted by Envoy.
            decisions = envoy_delta.get("filter.ok", 0) + envoy_delta.get("filter.over_limit", 0)
            result["decisions_counted_by"] = "Envoy ratelimit filter ok + over_limit deltas (the peer runs with DISABLE_STATS=true)"
        else:
            decisions = 0
        stray = {k: v for k, v in counters.items() if v and k.split("|", 1)[0] != (scenario.limit_id if scenario.ours else None)}
        if stray:
            warnings.append(f"ratelimit_svc counted hits {'(it must not be called on the HTTP-check gateway) ' if scenario.http else ''}"
                            f"on other limits during this run: {stray}")
        authz_stray = {k: v for k, v in authz_counters.items() if v and k.split("|", 1)[0] != (scenario.limit_id if scenario.http_check else None)}
        if authz_stray:
            warnings.append(f"the HTTP check counted hits on other limits during this run: {authz_stray}")
        if scenario.http:
            result["envoy_ext_authz"] = ext_authz_delta
            if not scenario.http_check and any(authz_decided.values()):
                warnings.append(f"the HTTP check was called on a route without rateLimits: {dict(authz_decided)}")
        limit_counts = limit
        redis_calls = limit_counts.get("redis_calls", 0)
        redis_errors = {k.split("|", 1)[1]: v for k, v in limit_counts.items() if k.startswith("redis_errors|")}
        fallbacks = sum(v for k, v in limit_counts.items() if k.startswith("fallback_decisions|"))
        evalsha = commands.get("evalsha", {}).get("calls", 0) + commands.get("eval", {}).get("calls", 0)
        if scenario.peer and scenario.route:
            # One decision = one pipeline (INCRBY + EXPIRE, one round trip); over-limit keys in
            # the local cache cost none. GET only with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT.
            redis_calls = commands.get("incrby", {}).get("calls", 0) + commands.get("get", {}).get("calls", 0)
            peer_keys_after = self.peer_keys(scenario)
            result["peer"] = {
                "redis_round_trips": redis_calls,
                "incrby_per_decision": round(commands.get("incrby", {}).get("calls", 0) / decisions, 4) if decisions else None,
                "expire_per_decision": round(commands.get("expire", {}).get("calls", 0) / decisions, 4) if decisions else None,
                "redis_keys": peer_keys_after,
                "new_windows": sorted(set(peer_keys_after) - set(peer_keys_before)),
                "round_trips_counted_by": "Redis INCRBY (+GET) calls from INFO commandstats: the peer pipelines INCRBY+EXPIRE per decision",
            }
            if scenario.expect_status == 200 and decisions and redis_calls < 0.99 * decisions:
                warnings.append(f"the peer made {redis_calls} INCRBY for {decisions} decisions: its config did not match every descriptor "
                                "(an unmatched descriptor is answered OK without Redis)")
        result["decisions"] = decisions
        result["decisions_per_s"] = round(decisions / load["duration_s"], 1) if decisions else None
        result["redis"] = {
            "calls_per_decision": round(redis_calls / decisions, 4) if decisions and not scenario.trivial else None,
            "evalsha_per_decision": round(evalsha / decisions, 4) if decisions else None,
            "commands_per_decision": round(sum(c["calls"] for c in commands.values()) / decisions, 4) if decisions else None,
            "errors": redis_errors,
            "fallback_decisions": fallbacks,
            "commandstats_delta": commands,
            "connected_clients": {"before": clients_before, "after": clients_after},
            "note": "calls_per_decision is ratelimit_svc's count (gatehouse_ratelimit_redis_calls_total); evalsha_per_decision "
                    "is Redis's (INFO commandstats); commands_per_decision also counts the commands the Lua scripts run and "
                    "connection handshakes (HELLO, CLIENT); connected_clients includes this script's one connection",
        }
        if scenario.peer:
            result["redis"]["note"] = ("calls_per_decision is Redis round trips (INCRBY calls: INCRBY+EXPIRE go in one pipeline) "
                                       "per decision; commands_per_decision counts INCRBY and EXPIRE apart; evalsha is 0 (no scripts)")
        result["envoy_ratelimit"] = envoy_delta
        if scenario.http and envoy_delta:
            warnings.append(f"Envoy's ratelimit filter ran on the HTTP-check gateway ({envoy_delta}): ratelimit_svc's path, not the check's")
        idle_cores = {name: round((cpu_seconds(pid) - idle_before[name]) / cpu["wall"], 3) for name, pid in idle_pids.items()}
        result["cpu"] = {
            "ratelimit_us_per_decision": round(cpu["service"] * 1e6 / decisions, 1) if decisions else None,
            "decisions_per_ratelimit_cpu_s": round(decisions / cpu["service"]) if decisions and cpu["service"] else None,
            "ratelimit_plus_redis_us_per_decision": round((cpu["service"] + cpu["redis"]) * 1e6 / decisions, 1) if decisions else None,
            "ratelimit_cores": round(cpu["service"] / cpu["wall"], 3),
            "ratelimit_kernel_share": round(service_system / cpu["service"], 3) if cpu["service"] else None,
            "ratelimit_context_switches_per_decision": round(switches / decisions, 2) if decisions else None,
            "redis_us_per_decision": round(cpu["redis"] * 1e6 / decisions, 1) if decisions else None,
            "redis_cores": round(cpu["redis"] / cpu["wall"], 3),
            **request_costs(cpu, ("envoy", "upstream", "wrk"), requests),
            **machine_costs(cpu, ("service", "envoy", "upstream", "redis", "wrk"), window.load_average),
        }
        result["cpu"]["idle_other_limiters_cores"] = idle_cores
        if scenario.trivial:
            result["cpu"]["ratelimit_process"] = "trivial servicer"
        elif scenario.http:
            result["cpu"]["ratelimit_process"] = ("gatehouse ext-authz process tree, workers: 1 (utime+stime, all threads)" if scenario.route
                                                  else "gatehouse ext-authz, idle (no ext_authz call on a public route without limits)")
        elif scenario.peer:
            result["cpu"]["ratelimit_process"] = ("envoyproxy/ratelimit (all threads)" if scenario.route
                                                  else "envoyproxy/ratelimit, idle (no rate-limit call on this route)")
        elif scenario.limit_id is None:
            result["cpu"]["ratelimit_process"] = "ratelimit_svc, idle (no rate-limit call on this route)"
        filter_errors = result["envoy_ratelimit"].get("filter.error", 0) + result["envoy_ratelimit"].get("filter.failure_mode_allowed", 0)
        if redis_errors or fallbacks:
            warnings.append(f"{'the HTTP check' if scenario.http else 'ratelimit_svc'}'s Redis calls failed ({redis_errors}) and {fallbacks} decisions came from onStoreFailure "
                            "(local): Redis calls per decision is below what the mode costs")
        if filter_errors:
            warnings.append(f"Envoy's ratelimit filter saw {filter_errors} failed calls (timeouts or errors; let through)")
        # wrk counts the requests it completed; up to one per connection was still in flight
        # (decided, not counted) when it stopped.
        if scenario.route is not None and abs(decisions - requests) > self.args.connections + max(2, requests // 1000):
            warnings.append(f"decisions ({decisions}) differ from requests ({requests})")
        if not scenario.calls_service and (decisions or redis_calls):
            warnings.append("a limiter decided on a route without rateLimits")
        if profile is not None:
            result["profiled"] = True
            result["profile"] = profile
        if warnings:
            result["warning"] = "; ".join(warnings)
        progress(
            f"  {scenario.name:<18} {load['rps']:>9.1f} req/s  p50 {load['latency_ms']['p50']:.2f} ms  p99 {load['latency_ms']['p99']:.2f} ms  "
            f"decisions {decisions}  redis calls/decision {result['redis']['calls_per_decision']}  "
            f"evalsha/decision {result['redis']['evalsha_per_decision']}  service {result['cpu']['ratelimit_us_per_decision']} us/decision "
            f"({result['cpu']['ratelimit_cores']} cores)  status errors {load['status_errors']}{'' if result['status_as_expected'] else ' (UNEXPECTED)'}"
            + (f"  WARNING {result['warning']}" if warnings else "")
        )
        return result

    def warm_up(self, wanted: list[LimitScenario]) -> None:
        for name in ("open_direct", "exact_echo", "hybrid_echo", "http_exact_echo", "http_hybrid_echo", "peer_echo"):
            scenario = BY_NAME[name]
            if scenario in wanted:
                self.preflight(scenario)
                self.wrk(scenario, self.args.warmup, f"warmup-{name}")

    def service_cost(self, n: int) -> dict[str, Any]:
        assert self.redis is not None
        return asyncio.run(_service_cost(self.args, self.redis.url, n))


IN_PROCESS_CASE = {"exact_echo": "exact", "hybrid_echo": "hybrid", "exact_deny": "exact_deny", "hybrid_deny": "hybrid_deny"}


def decomposition(results: dict[str, dict[str, Any]], in_process: dict[str, Any]) -> list[dict[str, Any]]:
    """Per decision: the ratelimit_svc process's CPU through Envoy = the service's own work
    (measured in-process: ShouldRateLimit + protobuf parse/serialize) + everything else
    (grpc.aio, the event loop, syscalls). The trivial servicer's CPU per decision is bare grpcio's."""
    trivial = results.get("trivial_grpc_echo", {}).get("cpu", {}).get("ratelimit_us_per_decision")
    rows = []
    for name, case in IN_PROCESS_CASE.items():
        if name not in results:
            continue
        total = results[name]["cpu"]["ratelimit_us_per_decision"]
        own = in_process.get(case, {}).get("total_cpu_us")
        rows.append({
            "scenario": name,
            "ratelimit_cpu_us_per_decision": total,
            "service_in_process_us": own,
            "of_which_Limiter_hit_us": in_process.get(case, {}).get("Limiter_hit_cpu_us"),
            "rest_grpc_asyncio_us": round(total - own, 1) if total is not None and own is not None else None,
            "trivial_grpc_servicer_us": trivial,
            "added_over_trivial_us": round(total - trivial, 1) if total is not None and trivial is not None else None,
        })
    return rows


RPS_RATIOS = (
    ("open_echo", "open_direct"),
    ("exact_echo", "open_echo"),
    ("hybrid_echo", "open_echo"),
    ("hybrid_echo", "exact_echo"),
    ("trivial_grpc_echo", "open_echo"),
    ("exact_echo", "trivial_grpc_echo"),
    ("hybrid_echo", "trivial_grpc_echo"),
    ("exact_deny", "open_direct"),
    ("hybrid_deny", "open_direct"),
    ("hybrid_deny", "exact_deny"),
    ("peer_open_echo", "open_echo"),
    ("peer_echo", "open_echo"),
    ("peer_echo", "peer_open_echo"),
    ("hybrid_echo", "peer_echo"),
    ("exact_echo", "peer_echo"),
    ("hybrid_deny", "peer_deny"),
    ("http_open_echo", "open_echo"),
    ("http_hybrid_echo", "http_open_echo"),
    ("http_exact_echo", "http_open_echo"),
    ("http_hybrid_echo", "hybrid_echo"),
    ("http_hybrid_echo", "peer_echo"),
    ("http_hybrid_deny", "peer_deny"),
)
"""Requests/s ratios of the same run, reported as ``<a>_over_<b>``."""
CPU_RATIOS = (
    ("ratelimit_cpu_hybrid_over_exact", "hybrid_echo", "exact_echo", "ratelimit_us_per_decision"),
    ("envoy_cpu_exact_echo_over_open_echo", "exact_echo", "open_echo", "envoy_us_per_request"),
    ("ratelimit_cpu_hybrid_over_peer", "hybrid_echo", "peer_echo", "ratelimit_us_per_decision"),
    ("ratelimit_cpu_exact_over_peer", "exact_echo", "peer_echo", "ratelimit_us_per_decision"),
    ("envoy_cpu_peer_echo_over_open_echo", "peer_echo", "open_echo", "envoy_us_per_request"),
    ("ratelimit_cpu_http_hybrid_over_hybrid", "http_hybrid_echo", "hybrid_echo", "ratelimit_us_per_decision"),
    ("ratelimit_cpu_http_exact_over_exact", "http_exact_echo", "exact_echo", "ratelimit_us_per_decision"),
    ("ratelimit_cpu_http_hybrid_over_peer", "http_hybrid_echo", "peer_echo", "ratelimit_us_per_decision"),
    ("ratelimit_cpu_http_exact_over_peer", "http_exact_echo", "peer_echo", "ratelimit_us_per_decision"),
    ("envoy_cpu_http_hybrid_echo_over_http_open_echo", "http_hybrid_echo", "http_open_echo", "envoy_us_per_request"),
)
"""(name, scenario, its baseline, the CPU field compared)."""


def summarise(results: dict[str, dict[str, Any]], in_process: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    def rps(name: str) -> float | None:
        return results[name]["rps"] if name in results else None

    def latency(name: str, p: str) -> float | None:
        return results[name]["latency_ms"][p] if name in results else None

    def cpu(name: str, field: str) -> float | None:
        value = results[name]["cpu"][field] if name in results else None
        return value if isinstance(value, (int, float)) else None

    baseline = {
        "envoy_ceiling_rps": rps("open_direct"),
        "proxied_no_ratelimit_rps": rps("open_echo"),
        "envoy_ceiling_p50_ms": latency("open_direct", "p50"),
        "proxied_no_ratelimit_p50_ms": latency("open_echo", "p50"),
        "proxied_no_ratelimit_p99_ms": latency("open_echo", "p99"),
    }
    ratios = {f"{a}_over_{b}": ratio(rps(a), rps(b)) for a, b in RPS_RATIOS}
    ratios.update({name: ratio(cpu(a, field), cpu(b, field)) for name, a, b, field in CPU_RATIOS})
    added = {
        f"{name}_{p}_added_ms": round(latency(name, p) - latency(base, p), 3)  # type: ignore[operator]
        for name, base in (("exact_echo", "open_echo"), ("hybrid_echo", "open_echo"), ("trivial_grpc_echo", "open_echo"))
        for p in ("p50", "p99")
        if name in results and base in results
    }
    hybrid = results.get("hybrid_echo", {}).get("redis", {}).get("calls_per_decision")
    aim = {
        "hybrid_redis_calls_per_decision": hybrid,
        "target": f"<= {AIM_CALLS_PER_DECISION}",
        "met": hybrid <= AIM_CALLS_PER_DECISION if hybrid is not None else None,
        "max_batch": args.max_batch,
        "expected_calls_per_decision": round(1 / args.max_batch, 4),
        "exact_redis_calls_per_decision": results.get("exact_echo", {}).get("redis", {}).get("calls_per_decision"),
        "http_check_hybrid_redis_calls_per_decision": results.get("http_hybrid_echo", {}).get("redis", {}).get("calls_per_decision"),
        "conditions": f"one hot key ({args.key}), steady rate, {args.algorithm} limit {STEADY_LIMIT} per {STEADY_WINDOW} "
                      "(far above the rate: the batch is maxBatch), one ratelimit_svc instance (expectedInstances 1)",
    }
    table = [
        {
            "scenario": r["name"],
            "limiter": r.get("limiter"),
            "rps": r["rps"],
            "decisions_per_s": r.get("decisions_per_s"),
            "p50_ms": r["latency_ms"]["p50"],
            "p90_ms": r["latency_ms"]["p90"],
            "p99_ms": r["latency_ms"]["p99"],
            "rps_over_open_echo": ratio(r["rps"], rps("open_echo")),
            "redis_calls_per_decision": r["redis"]["calls_per_decision"],
            "redis_evalsha_per_decision": r["redis"]["evalsha_per_decision"],
            "fallback_decisions": r["redis"]["fallback_decisions"],
            "ratelimit_us_per_decision": r["cpu"]["ratelimit_us_per_decision"],
            "decisions_per_ratelimit_cpu_s": r["cpu"].get("decisions_per_ratelimit_cpu_s"),
            "ratelimit_cores": r["cpu"]["ratelimit_cores"],
            "redis_us_per_decision": r["cpu"]["redis_us_per_decision"],
            "ratelimit_plus_redis_us_per_decision": r["cpu"].get("ratelimit_plus_redis_us_per_decision"),
            "envoy_us_per_request": r["cpu"]["envoy_us_per_request"],
            "other_processes_cores": r["cpu"]["other_processes_cores"],
            "status_as_expected": r["status_as_expected"],
        }
        for r in results.values()
    ]
    report = {"baseline": baseline, "ratios": {k: v for k, v in ratios.items() if v is not None}, "latency_added": added,
              "hybrid_redis_calls_per_decision": hybrid, "aim": aim, "table": table,
              "cpu_per_decision_decomposition": decomposition(results, in_process)}
    if any(r.get("stack") in ("peer", "http") for r in results.values()):
        report["peer_comparison"] = peer_comparison(results)
        report["peer_aim"] = peer_aim(results)
    return report


PEER_ROWS = (("exact_echo", "peer_echo"), ("hybrid_echo", "peer_echo"), ("http_exact_echo", "peer_echo"), ("http_hybrid_echo", "peer_echo"),
             ("peer_echo", "peer_echo"), ("exact_deny", "peer_deny"), ("hybrid_deny", "peer_deny"), ("http_exact_deny", "peer_deny"),
             ("http_hybrid_deny", "peer_deny"), ("peer_deny", "peer_deny"))
OWN_BASELINE = {"main": "open_echo", "peer": "peer_open_echo", "http": "http_open_echo"}


def peer_comparison(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Ours (ratelimit_svc exact and hybrid, and the HTTP check's) beside envoyproxy/ratelimit on
    the same route and descriptor, per decision: the limiter process's CPU, Redis's, and Envoy's
    per request; requests/s over the no-rate-limit baseline of the same gateway and of the first
    one. The HTTP check's rows also compare it with ratelimit_svc on the same path."""
    rows = []
    for name, peer in PEER_ROWS:
        if name not in results:
            continue
        r, other = results[name], results.get(peer)
        baseline = results.get(OWN_BASELINE.get(r.get("stack", "main"), "open_echo"), {}).get("rps")
        row = {
            "scenario": name,
            "limiter": r.get("limiter"),
            "decisions_per_s": r.get("decisions_per_s"),
            "rps": r["rps"],
            "p50_ms": r["latency_ms"]["p50"],
            "p99_ms": r["latency_ms"]["p99"],
            "limiter_cpu_us_per_decision": r["cpu"]["ratelimit_us_per_decision"],
            "decisions_per_limiter_cpu_s": r["cpu"].get("decisions_per_ratelimit_cpu_s"),
            "limiter_cores": r["cpu"]["ratelimit_cores"],
            "redis_cpu_us_per_decision": r["cpu"]["redis_us_per_decision"],
            "redis_round_trips_per_decision": r["redis"]["calls_per_decision"],
            "limiter_plus_redis_cpu_us_per_decision": r["cpu"].get("ratelimit_plus_redis_us_per_decision"),
            "envoy_cpu_us_per_request": r["cpu"]["envoy_us_per_request"],
            "rps_over_open_echo": ratio(r["rps"], results.get("open_echo", {}).get("rps")),
            "rps_over_own_gateway_open_echo": ratio(r["rps"], baseline),
        }
        if other is not None and name != peer:
            row[f"decisions_per_limiter_cpu_s_over_{peer}"] = ratio(r["cpu"].get("decisions_per_ratelimit_cpu_s"),
                                                                   other["cpu"].get("decisions_per_ratelimit_cpu_s"))
            row[f"limiter_plus_redis_cpu_over_{peer}"] = ratio(r["cpu"].get("ratelimit_plus_redis_us_per_decision"),
                                                              other["cpu"].get("ratelimit_plus_redis_us_per_decision"))
            row[f"decisions_per_s_over_{peer}"] = ratio(r.get("decisions_per_s"), other.get("decisions_per_s"))
        ours = results.get(HTTP_COUNTERPART.get(name, ""))
        if r.get("stack") == "http" and ours is not None:
            counterpart = HTTP_COUNTERPART[name]
            row["ratelimit_svc_scenario"] = counterpart
            row["decisions_per_limiter_cpu_s_over_ratelimit_svc"] = ratio(r["cpu"].get("decisions_per_ratelimit_cpu_s"),
                                                                          ours["cpu"].get("decisions_per_ratelimit_cpu_s"))
            row["limiter_plus_redis_cpu_over_ratelimit_svc"] = ratio(r["cpu"].get("ratelimit_plus_redis_us_per_decision"),
                                                                     ours["cpu"].get("ratelimit_plus_redis_us_per_decision"))
            row["decisions_per_s_over_ratelimit_svc"] = ratio(r.get("decisions_per_s"), ours.get("decisions_per_s"))
        rows.append(row)
    return rows


def peer_aim(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The project's aim: ratelimit_svc in hybrid mode makes at least AIM_PEER_RATIO times as
    many decisions per CPU second (of the limiter process) as envoyproxy/ratelimit."""
    ours = results.get("hybrid_echo", {}).get("cpu", {}).get("decisions_per_ratelimit_cpu_s")
    peer = results.get("peer_echo", {}).get("cpu", {}).get("decisions_per_ratelimit_cpu_s")
    ours_total = results.get("hybrid_echo", {}).get("cpu", {}).get("ratelimit_plus_redis_us_per_decision")
    peer_total = results.get("peer_echo", {}).get("cpu", {}).get("ratelimit_plus_redis_us_per_decision")
    value = ratio(ours, peer)
    aim: dict[str, Any] = {
        "hybrid_decisions_per_limiter_cpu_s": ours,
        "peer_decisions_per_limiter_cpu_s": peer,
        "ratio": value,
        "target": f">= {AIM_PEER_RATIO}",
        "met": value >= AIM_PEER_RATIO if value is not None else None,
        "with_redis_cpu_ratio": ratio(peer_total, ours_total),
        "conditions": "the same route, descriptor, wrk command and Redis; decisions per CPU second of the limiter process "
                      "(utime+stime, all threads); with_redis_cpu_ratio counts Redis's CPU too (peer's ÷ ours per decision: >1 favours ours)",
    }
    if any(name in results for name in ("http_hybrid_echo", "http_exact_echo")):
        aim["http_check"] = http_check_aim(results)
    return aim


def http_check_aim(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The same aim for the HTTP check (ext_authz deciding a public route's limits over HTTP):
    its decisions per CPU second of the ext_authz process tree ÷ the peer's, in hybrid mode
    (the aim) and in exact mode; with Redis's CPU; and ÷ ratelimit_svc's in the same mode."""
    def field(name: str, key: str) -> Any:
        return results.get(name, {}).get("cpu", {}).get(key)

    per_s, total = "decisions_per_ratelimit_cpu_s", "ratelimit_plus_redis_us_per_decision"
    value = ratio(field("http_hybrid_echo", per_s), field("peer_echo", per_s))
    return {
        "hybrid_decisions_per_limiter_cpu_s": field("http_hybrid_echo", per_s),
        "exact_decisions_per_limiter_cpu_s": field("http_exact_echo", per_s),
        "peer_decisions_per_limiter_cpu_s": field("peer_echo", per_s),
        "ratio": value,
        "target": f">= {AIM_PEER_RATIO}",
        "met": value >= AIM_PEER_RATIO if value is not None else None,
        "with_redis_cpu_ratio": ratio(field("peer_echo", total), field("http_hybrid_echo", total)),
        "exact_ratio": ratio(field("http_exact_echo", per_s), field("peer_echo", per_s)),
        "exact_with_redis_cpu_ratio": ratio(field("peer_echo", total), field("http_exact_echo", total)),
        "deny_hybrid_ratio": ratio(field("http_hybrid_deny", per_s), field("peer_deny", per_s)),
        "hybrid_over_ratelimit_svc_hybrid": ratio(field("http_hybrid_echo", per_s), field("hybrid_echo", per_s)),
        "conditions": "the same routes, descriptor key, algorithm, limits, wrk command and Redis as ratelimit_svc and the peer; "
                      "decisions per CPU second of the ext_authz process tree (workers: 1; utime+stime, all threads); "
                      "with_redis_cpu_ratio: peer's (limiter + Redis) CPU per decision ÷ the HTTP check's (>1 favours the HTTP check)",
    }


def peer_version() -> str | None:
    match = re.search(r"^RATELIMIT_VERSION=(\S+)", PEER_BUILD_SCRIPT.read_text(), re.MULTILINE)
    return f"github.com/envoyproxy/ratelimit@{match.group(1)}" if match else None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_wrk_arguments(parser, duration=10, threads=2,
                      warmup_help="seconds of unmeasured load on open_direct, exact_echo and hybrid_echo first (0: none)")
    parser.add_argument("--quick", action="store_true", help="4 s per scenario, 1 s warm-up, 500 in-process calls per case")
    parser.add_argument("--scenarios", help="comma-separated, in this order (default: all but the peer's; with --peer: all, each peer "
                                            "scenario after ours of the same kind)")
    parser.add_argument("--max-batch", type=int, default=100, help="ratelimit_svc's hybrid.maxBatch (default: %(default)s)")
    parser.add_argument("--algorithm", choices=("slidingWindow", "fixedWindow", "tokenBucket"), default="slidingWindow",
                        help="every limit's algorithm (default: %(default)s)")
    parser.add_argument("--key", default="header:x-tenant",
                        help="every limit's key: header:<name> or apiKey (each request sends the same value) or ip (default: %(default)s)")
    parser.add_argument("--ratelimit-timeout", default="200ms", help="the control plane's rateLimit.timeout (Envoy's deadline per decision)")
    parser.add_argument("--redis-timeout", help="ratelimit_svc's redis.timeout (default: the harness's 50ms, also the service's default)")
    parser.add_argument("--in-process-calls", type=int, default=2000, help="calls per case of the in-process ShouldRateLimit measurement (0: skip)")
    parser.add_argument("--peer", action="store_true",
                        help="add envoyproxy/ratelimit behind a third, identical gateway on the same Redis (peer_open_echo, peer_echo, peer_deny)")
    parser.add_argument("--http-check", action="store_true",
                        help="add the HTTP check (gatehouse ext-authz deciding the routes' limits over HTTP) behind a fourth gateway "
                             "(http_open_echo, http_exact_echo, http_hybrid_echo, http_exact_deny, http_hybrid_deny; implied by --peer)")
    parser.add_argument("--peer-pipeline-window", default=PEER_PIPELINE_WINDOW,
                        help="the peer's REDIS_PIPELINE_WINDOW (default %(default)s, its README's recommendation; no effect with REDIS_TYPE=SINGLE at the pinned version)")
    parser.add_argument("--peer-local-cache-bytes", type=int, default=PEER_LOCAL_CACHE_BYTES,
                        help="the peer's LOCAL_CACHE_SIZE_IN_BYTES for over-limit keys (default %(default)s; 0: off)")
    parser.add_argument("--peer-pool-size", type=int, default=10, help="the peer's REDIS_POOL_SIZE (default %(default)s, its default)")
    parser.add_argument("--peer-gomaxprocs", type=int, help="the peer's GOMAXPROCS (default: unset, Go uses every core)")
    parser.add_argument("--profile-dir", help="after the measured runs, run each --profile-scenarios scenario again with py-spy --native "
                                              "on its limiter process (ratelimit_svc); raw stacks go here, summaries to profiled_runs")
    parser.add_argument("--profile-scenarios", default="hybrid_echo", help="comma-separated (default: %(default)s)")
    parser.add_argument("--profile-rate", type=int, default=100, help="py-spy samples per second (default: %(default)s)")
    add_workdir_arguments(parser)
    args = parser.parse_args(argv)
    if args.scenarios is None:
        args.scenarios = ",".join(PEER_ORDER if args.peer else [s.name for s in SCENARIOS if not s.peer and not s.http])
    chosen(parser, args.scenarios, BY_NAME)
    if any(BY_NAME[n].peer for n in args.scenarios.split(",") if n):
        args.peer = True
    if args.http_check and not args.peer and args.scenarios == ",".join(s.name for s in SCENARIOS if not s.peer and not s.http):
        args.scenarios += "," + ",".join(s.name for s in HTTP_SCENARIOS)
    args.http_check = any(BY_NAME[n].http for n in args.scenarios.split(",") if n)
    chosen(parser, args.profile_scenarios, BY_NAME, "--profile-scenarios")
    check_wrk_arguments(parser, args)
    if not re.fullmatch(r"ip|apiKey|header:[a-z0-9!#$%&'*+.^_`|~-]+", args.key):
        parser.error("--key must be ip, apiKey or header:<lower-case name> (user needs ext_authz, which this bench does not run)")
    if args.max_batch < 1:
        parser.error("--max-batch must be at least 1")
    if args.quick:
        args.duration, args.warmup, args.in_process_calls = 4, 1, min(args.in_process_calls, 500)
    return args


def settings(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {
        **wrk_settings(args),
        "envoy_concurrency": ENVOY_CONCURRENCY,
        "key": args.key,
        "key_value": "127.0.0.1 (the client address)" if args.key == "ip" else KEY_VALUE,
        "algorithm": args.algorithm,
        "steady_limit": f"{STEADY_LIMIT} per {STEADY_WINDOW}",
        "deny_limit": f"1 per {DENY_WINDOW}",
        "hybrid_max_batch": args.max_batch,
        "hybrid_spread": 2.0,
        "expected_instances": 1,
        "ratelimit_timeout": args.ratelimit_timeout,
        "ratelimit_redis_timeout": args.redis_timeout or "50ms (tests/harness/ratelimit.py)",
        "upstream": "examples/upstream/echo.py (Python/aiohttp), one process",
    }
    if args.peer:
        out["peer"] = {
            "implementation": peer_version(),
            "algorithm": "fixed window (the peer's only one): one pipelined INCRBY+EXPIRE per decision",
            "steady_limit": f"{STEADY_LIMIT} per {PEER_STEADY_UNIT}",
            "deny_limit": f"1 per {PEER_DENY_UNIT}",
            "domain": PEER_DOMAIN,
            "descriptor": f"[limit=default/<route>#0, {descriptor_key(args)}=<value>] (the same Envoy sends ratelimit_svc)",
            "redis_pipeline_window": args.peer_pipeline_window,
            "redis_pipeline_window_note": "REDIS_PIPELINE_WINDOW only takes effect with REDIS_TYPE=cluster at the pinned version; here SINGLE",
            "local_cache_size_in_bytes": args.peer_local_cache_bytes,
            "redis_pool_size": args.peer_pool_size,
            "gomaxprocs": args.peer_gomaxprocs or f"unset (Go: {os.cpu_count()} cores)",
            "stats": "DISABLE_STATS=true, USE_STATSD=false (no stats sink: the peer's cheapest setting)",
            "log_level": "warn",
            "gateway": "a third GatewayStack with the same routes; only rateLimit.address differs (so only the cluster's endpoint)",
        }
    if args.http_check:
        out["http_check"] = {
            "implementation": "gatehouse ext-authz, workers: 1, http.rateLimit (limiter/: the same engine, Lua scripts and hybrid buckets)",
            "decides": "public routes' limits (extAuthz.publicRouteLimits, default true): ext_authz filter gatehouse.public_route_limits, "
                       "policy auth.public, no token sent",
            "algorithm": args.algorithm,
            "limits": "the same routes and limits as ratelimit_svc (the same limit ids, so the same Redis counters)",
            "hybrid_max_batch": args.max_batch,
            "expected_instances": 1,
            "redis_timeout": args.redis_timeout or "50ms",
            "gateway": "a fourth GatewayStack with the same routes; its control plane has extAuthz {address: [<check>], protocol: http, "
                       f"forwardHeaders: [<key header>]}} and rateLimit {{address: {HTTP_CHECK_UNUSED_RATELIMIT}}} (limits on; nothing "
                       "listens there, so any ratelimit_svc call would show as Envoy's ratelimit filter error)",
            "cpu": "utime+stime of the ext_authz process tree",
        }
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    require_wrk()
    wanted = [BY_NAME[n] for n in args.scenarios.split(",") if n]
    results: dict[str, dict[str, Any]] = {}
    with Run("ratelimit", argv, args, progress) as run:
        report = run.report
        report["settings"] = settings(args)
        report["machine"] = describe(("grpcio", "protobuf", "redis", "prometheus-client", "structlog"),
                                     ("ratelimit_svc", "gatehouse", "control_plane", "ext_authz", "limiter"),
                                     redis_server=command_output("redis-server", "--version"), ratelimit_peer=peer_version())
        bench = LimitBench(args, run)
        progress("starting Redis, ratelimit_svc, control plane, Envoy, upstream")
        report["stack"] = bench.start()
        if args.peer:
            progress("starting envoyproxy/ratelimit and its gateway")
            report["stack"]["peer"] = bench.start_peer()
        if args.http_check:
            progress("starting the HTTP check (gatehouse ext-authz over HTTP) and its gateway")
            report["stack"]["http_check"] = bench.start_http_check()
        if args.warmup > 0:
            progress(f"warm-up: {args.warmup:g} s on open_direct, exact_echo, hybrid_echo{', http_exact_echo, http_hybrid_echo' if args.http_check else ''}"
                     f"{' and peer_echo' if args.peer else ''}")
            bench.warm_up(wanted)
        for scenario in wanted:
            results[scenario.name] = bench.run(scenario)
        if args.profile_dir:
            report["profiled_runs"] = {}
            for name in (n for n in args.profile_scenarios.split(",") if n):
                progress(f"profiled run (py-spy --native, {args.profile_rate} Hz) of {name}: not used in the table")
                report["profiled_runs"][name] = bench.run(BY_NAME[name], profile_to=Path(args.profile_dir) / f"ratelimit-{name}.txt")
        if args.in_process_calls > 0:
            progress(f"ShouldRateLimit in-process, {args.in_process_calls} calls per case")
            report["service_in_process"] = bench.service_cost(args.in_process_calls)
            for name, case in report["service_in_process"].items():
                progress(f"  {name:<12} CPU: ShouldRateLimit {case['ShouldRateLimit_cpu_us']} us + parse {case['parse_request_cpu_us']} us + "
                         f"serialize {case['serialize_response_cpu_us']} us; Limiter.hit {case['Limiter_hit_cpu_us']} us "
                         f"(wall {case['Limiter_hit_wall_us']} us); "
                         f"redis calls/decision {case['redis_calls_per_decision']}")
    summary = summarise(results, report.get("service_in_process", {}), args)
    aim = summary["aim"]
    if aim["met"] is not None:
        progress(f"hybrid Redis calls per decision {aim['hybrid_redis_calls_per_decision']} (aim {aim['target']}, "
                 f"maxBatch {args.max_batch}): {'met' if aim['met'] else 'NOT met'}")
    if summary.get("peer_aim", {}).get("met") is not None:
        peer = summary["peer_aim"]
        progress(f"hybrid decisions per limiter CPU second {peer['hybrid_decisions_per_limiter_cpu_s']} vs the peer's "
                 f"{peer['peer_decisions_per_limiter_cpu_s']}: {peer['ratio']}x (aim {peer['target']}): {'met' if peer['met'] else 'NOT met'}")
    http_aim = summary.get("peer_aim", {}).get("http_check", {})
    if http_aim.get("met") is not None:
        progress(f"HTTP check hybrid decisions per limiter CPU second {http_aim['hybrid_decisions_per_limiter_cpu_s']} vs the peer's "
                 f"{http_aim['peer_decisions_per_limiter_cpu_s']}: {http_aim['ratio']}x, with Redis CPU {http_aim['with_redis_cpu_ratio']}x "
                 f"(exact {http_aim['exact_ratio']}x; {http_aim['hybrid_over_ratelimit_svc_hybrid']}x ratelimit_svc's hybrid) "
                 f"(aim {http_aim['target']}): {'met' if http_aim['met'] else 'NOT met'}")
    run.print(**summary, scenarios=list(results.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
