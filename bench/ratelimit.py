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

    .venv/bin/python bench/ratelimit.py                          # all scenarios, 10 s each, ~80 s
    .venv/bin/python bench/ratelimit.py --quick                  # 4 s each, ~35 s
    .venv/bin/python bench/ratelimit.py --scenarios open_echo,exact_echo,hybrid_echo --max-batch 20

One JSON document goes to stdout; progress to stderr. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.harness.gateway import GatewayStack  # noqa: E402
from tests.harness.ports import free_port  # noqa: E402
from tests.harness.processes import ManagedProcess, port_open  # noqa: E402
from tests.harness.ratelimit import RateLimitServiceProcess  # noqa: E402
from tests.harness.redis import RedisServer  # noqa: E402
from tests.harness.route_repo import route_doc  # noqa: E402
from bench.proc_stats import children_cpu_seconds, context_switches, cpu_seconds, cpu_times, machine_busy_seconds  # noqa: E402
from bench.machine import command_output, describe  # noqa: E402

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
WRK_MARK = "WRKJSON "


def progress(message: str) -> None:
    print(f"[ratelimit {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- wrk --------------------------------------------------------------------------------

_LUA_DONE = r"""
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '%s{"requests":%d,"duration_us":%d,"bytes":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,' ..
    '"lat_min":%d,"lat_mean":%.1f,"lat_stdev":%.1f,"lat_max":%d,"p50":%d,"p90":%d,"p99":%d,"p999":%d}\n',
    "WRKJSON ", summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency.min, latency.mean, latency.stdev, latency.max,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9)))
end
"""


TRIVIAL_SERVER = '''"""A trivial RateLimitService: grpc.aio, same server options as ratelimit_svc, answers OK."""
import asyncio
import sys

import grpc
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

OK = rls_pb2.RateLimitResponse(overall_code=rls_pb2.RateLimitResponse.OK)


class Trivial(rls_pb2_grpc.RateLimitServiceServicer):
    async def ShouldRateLimit(self, request, context):
        return OK


async def main(address):
    server = grpc.aio.server()
    rls_pb2_grpc.add_RateLimitServiceServicer_to_server(Trivial(), server)
    server.add_insecure_port(address)
    await server.start()
    await server.wait_for_termination()


asyncio.run(main(sys.argv[1]))
'''


# -- process and service readings -------------------------------------------------------


_SAMPLE = re.compile(r'^(?P<name>gatehouse_ratelimit_\w+)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)$', re.MULTILINE)
_LABEL = re.compile(r'(\w+)="([^"]*)"')
_COUNTERS = ("hits", "over_limit", "near_limit", "shadow", "reservations", "reserved_tokens", "released_tokens",
             "lapsed_tokens", "redis_calls", "redis_errors", "fallback_decisions")


def ratelimit_counters(service: RateLimitServiceProcess) -> Counter[str]:
    """``<limit id>|<counter>[|<label>]`` → value, for ratelimit_svc's per-limit counters
    (``gatehouse_ratelimit_<counter>_total``; ``redis_calls`` by op, errors by reason)."""
    counts: Counter[str] = Counter()
    for match in _SAMPLE.finditer(service.metrics_text()):
        name = match["name"]
        if not name.endswith("_total"):
            continue
        counter = name.removeprefix("gatehouse_ratelimit_").removesuffix("_total")
        if counter not in _COUNTERS:
            continue
        labels = dict(_LABEL.findall(match["labels"] or ""))
        extra = labels.get("op") or labels.get("reason") or labels.get("policy")
        key = f"{labels.get('limit')}|{counter}" + (f"|{extra}" if extra else "")
        counts[key] += int(float(match["value"]))
    return counts


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


# -- scenarios --------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    name: str
    path: str
    description: str
    route: str | None = None
    """The route whose limit this scenario exercises (its limit id is ``default/<route>#0``)."""
    expect_status: int = 200
    trivial: bool = False
    """Run against the second stack, whose rate-limit service is a trivial grpc.aio servicer (returns OK)."""

    @property
    def limit_id(self) -> str | None:
        return f"default/{self.route}#0" if self.route else None

    @property
    def calls_service(self) -> bool:
        return self.route is not None or self.trivial


SCENARIOS = [
    Scenario("open_direct", "/open/direct", "Envoy direct response, no rateLimits: Envoy's ceiling"),
    Scenario("open_echo", "/open/echo", "proxied to the echo upstream, no rateLimits: the baseline (no rate-limit call)"),
    Scenario("exact_echo", "/rl/exact", "proxied, one limit far above the rate, mode exact: one Redis script per decision", "rl-exact"),
    Scenario("hybrid_echo", "/rl/hybrid", "proxied, the same limit, mode hybrid: decisions from local tokens, batched reservations", "rl-hybrid"),
    Scenario("exact_deny", "/deny/exact", "limit 1 per hour, mode exact: 429, every decision asks Redis", "deny-exact", 429),
    Scenario("hybrid_deny", "/deny/hybrid", "limit 1 per hour, mode hybrid: 429, the denial is remembered until Redis said a hit could pass", "deny-hybrid", 429),
    Scenario("trivial_grpc_echo", "/rl/exact", "the same route, but Envoy's rate-limit service is a trivial grpc.aio servicer that returns OK: bare grpcio's cost", trivial=True),
]
BY_NAME = {s.name: s for s in SCENARIOS}


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


# -- the run ----------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.redis: RedisServer | None = None
        self.redis_client: redis.Redis | None = None
        self.ratelimit: RateLimitServiceProcess | None = None
        self.stack: GatewayStack | None = None
        self.trivial: ManagedProcess | None = None
        self.trivial_stack: GatewayStack | None = None
        self.report_lua = workdir / "report.lua"
        self.report_lua.write_text(_LUA_DONE)
        self.header = key_header(args)

    # setup / teardown

    def _gateway(self, name: str, ratelimit_address: str) -> GatewayStack:
        extra = {"rateLimit": {"address": ratelimit_address, "timeout": self.args.ratelimit_timeout}}
        stack = GatewayStack(self.workdir / name, upstreams=("svc-a",), control_plane_extra=extra)
        stack.commit_routes({"routes.yaml": routes(self.args)})
        try:
            stack.start(wait_path="/open/direct")
            stack.wait_status("/open/echo", 200)
        except BaseException:
            stack.stop()
            raise
        return stack

    def start(self) -> dict[str, Any]:
        started = time.monotonic()
        self.redis = RedisServer.start(log_dir=self.workdir / "redis")
        self.redis_client = redis.Redis(host=self.redis.host, port=self.redis.port)
        extra: dict[str, Any] = {"hybrid": {"maxBatch": self.args.max_batch}}
        if self.args.redis_timeout:
            extra["redis"] = {"url": self.redis.url, "timeout": self.args.redis_timeout}
        self.ratelimit = RateLimitServiceProcess(self.workdir / "ratelimit", redis_url=self.redis.url, extra=extra)
        self.stack = self._gateway("stack", self.ratelimit.address)
        self.ratelimit.start(self.stack.control_plane.xds_port)
        # Until ratelimit_svc has its policies, Envoy fails open: wait for the service's headers.
        stack = self.stack
        deadline = time.monotonic() + 15
        while stack.get("/rl/exact", headers=self.headers()).headers.get("x-ratelimit-limit") is None:
            if time.monotonic() > deadline:
                raise RuntimeError("ratelimit_svc never answered for /rl/exact (no x-ratelimit-limit header)")
            time.sleep(0.05)
        assert self.ratelimit.process is not None
        return {"start_s": round(time.monotonic() - started, 2), "ratelimit_pid": self.ratelimit.process.pid,
                "ratelimit_threads": len(list(Path(f"/proc/{self.ratelimit.process.pid}/task").iterdir()))}

    def start_trivial(self) -> None:
        """A second gateway whose rate-limit service is TRIVIAL_SERVER (started on first use)."""
        if self.trivial_stack is not None:
            return
        script = self.workdir / "trivial_ratelimit.py"
        script.write_text(TRIVIAL_SERVER)
        port = free_port()
        self.trivial = ManagedProcess.start([sys.executable, str(script), f"127.0.0.1:{port}"], name="trivial-ratelimit",
                                            log_dir=self.workdir / "trivial", cwd=REPO_ROOT)
        self.trivial.wait_until(lambda: port_open(port), 30, f"trivial ratelimit service on :{port}")
        self.trivial_stack = self._gateway("trivial-stack", f"127.0.0.1:{port}")

    def stop(self) -> None:
        if self.redis_client is not None:
            self.redis_client.close()
        for part in (self.trivial_stack, self.trivial, self.stack, self.ratelimit, self.redis):
            if part is not None:
                try:
                    part.stop()
                except Exception as exc:  # keep stopping the others
                    progress(f"stopping {part!r}: {exc}")

    def headers(self) -> dict[str, str]:
        return {self.header[0]: self.header[1]} if self.header else {}

    def preflight(self, scenario: Scenario) -> None:
        """Requests of this scenario's kind before the load: right status? A deny route
        admits its first request (limit 1), so up to two are sent."""
        stack = self.trivial_stack if scenario.trivial else self.stack
        assert stack is not None
        for _ in range(2 if scenario.expect_status == 429 else 1):
            reply = stack.get(scenario.path, headers=self.headers())
            if reply.status == scenario.expect_status:
                break
        if reply.status != scenario.expect_status:
            raise RuntimeError(f"{scenario.name}: {scenario.path} answered {reply.status}, expected {scenario.expect_status}: {reply.body[:300]!r}")
        if scenario.route and "x-ratelimit-limit" not in reply.headers:
            raise RuntimeError(f"{scenario.name}: {scenario.path} answered without x-ratelimit-limit: the limit is not in force")

    # one wrk run

    def wrk(self, scenario: Scenario, duration: int, log_name: str) -> dict[str, Any]:
        stack = self.trivial_stack if scenario.trivial else self.stack
        assert stack is not None
        url = f"http://127.0.0.1:{stack.listener_port}{scenario.path}"
        argv = ["wrk", "-t", str(self.args.threads), "-c", str(self.args.connections), "-d", f"{duration}s",
                "--timeout", "5s", "--latency"]
        if self.header:
            argv += ["-H", f"{self.header[0]}: {self.header[1]}"]
        argv += ["-s", str(self.report_lua), url]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 120)
        (self.workdir / f"{log_name}.wrk.txt").write_text(" ".join(argv) + "\n" + result.stdout + result.stderr)
        line = next((l for l in result.stdout.splitlines() if l.startswith(WRK_MARK)), None)
        if result.returncode != 0 or line is None:
            raise RuntimeError(f"wrk failed ({result.returncode}): {(result.stdout + result.stderr)[-2000:]}")
        raw = json.loads(line[len(WRK_MARK):])
        seconds = raw["duration_us"] / 1e6
        return {
            "requests": raw["requests"],
            "duration_s": round(seconds, 3),
            "rps": round(raw["requests"] / seconds, 1),
            "latency_ms": {k: round(raw[src] / 1000, 3) for k, src in
                           (("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p99.9", "p999"), ("max", "lat_max"), ("mean", "lat_mean"), ("stdev", "lat_stdev"))},
            "status_errors": raw["status"],
            "socket_errors": {k: raw[k] for k in ("connect", "read", "write", "timeout") if raw[k]},
            "command": " ".join(argv).replace(str(self.workdir), "$WORKDIR"),
        }

    def run(self, scenario: Scenario) -> dict[str, Any]:
        if scenario.trivial:
            progress("starting the second gateway (trivial grpc.aio rate-limit service)")
            self.start_trivial()
        stack = self.trivial_stack if scenario.trivial else self.stack
        service = self.trivial if scenario.trivial else (self.ratelimit.process if self.ratelimit else None)
        assert stack is not None and stack.envoy is not None and service is not None
        assert self.ratelimit is not None and self.redis is not None and self.redis.pid is not None and self.redis_client is not None
        self.preflight(scenario)
        service_pid, envoy_pid, upstream_pid, redis_pid = service.pid, stack.envoy.pid, stack.upstreams["svc-a"].pid, self.redis.pid
        counters_before = ratelimit_counters(self.ratelimit)
        commands_before = commandstats(self.redis_client)
        clients_before = int(self.redis_client.info("clients")["connected_clients"])
        envoy_before = envoy_ratelimit_stats(stack)
        cpu_before = {"service": cpu_seconds(service_pid), "envoy": cpu_seconds(envoy_pid), "upstream": cpu_seconds(upstream_pid),
                      "redis": cpu_seconds(redis_pid), "wrk": children_cpu_seconds(), "machine": machine_busy_seconds()}
        switches_before = context_switches(service_pid)
        service_system_before = cpu_times(service_pid)[1]
        load_average = os.getloadavg()[0]
        wall = time.monotonic()
        load = self.wrk(scenario, self.args.duration, scenario.name)
        wall = time.monotonic() - wall
        cpu = {"service": cpu_seconds(service_pid) - cpu_before["service"], "envoy": cpu_seconds(envoy_pid) - cpu_before["envoy"],
               "upstream": cpu_seconds(upstream_pid) - cpu_before["upstream"], "redis": cpu_seconds(redis_pid) - cpu_before["redis"],
               "wrk": children_cpu_seconds() - cpu_before["wrk"], "machine": machine_busy_seconds() - cpu_before["machine"]}
        switches = context_switches(service_pid) - switches_before
        service_system = cpu_times(service_pid)[1] - service_system_before
        commands = commandstats_delta(commands_before, commandstats(self.redis_client))
        clients_after = int(self.redis_client.info("clients")["connected_clients"])
        counters = ratelimit_counters(self.ratelimit) - counters_before
        envoy_after = envoy_ratelimit_stats(stack)
        requests = load["requests"]
        result: dict[str, Any] = {"name": scenario.name, "path": scenario.path, "description": scenario.description,
                                  "limit_id": scenario.limit_id, "expect_status": scenario.expect_status, **load}
        expected_errors = requests if scenario.expect_status >= 400 else 0
        result["status_as_expected"] = abs(load["status_errors"] - expected_errors) <= max(1, requests // 1000)
        warnings: list[str] = []
        if scenario.limit_id is not None:
            limit = of_limit(counters, scenario.limit_id)
            decisions = limit.get("hits", 0)
            result["decisions_counted_by"] = "gatehouse_ratelimit_hits_total delta"
            result["ratelimit_svc"] = limit
        elif scenario.trivial:
            decisions = requests  # the trivial servicer counts nothing; every request on this route is one call
            result["decisions_counted_by"] = "wrk requests (trivial servicer has no counter)"
        else:
            decisions = 0
        stray = {k: v for k, v in counters.items() if v and k.split("|", 1)[0] != scenario.limit_id}
        if stray:
            warnings.append(f"other limits counted hits during this run: {stray}")
        limit_counts = result.get("ratelimit_svc", {})
        redis_calls = limit_counts.get("redis_calls", 0)
        redis_errors = {k.split("|", 1)[1]: v for k, v in limit_counts.items() if k.startswith("redis_errors|")}
        fallbacks = sum(v for k, v in limit_counts.items() if k.startswith("fallback_decisions|"))
        evalsha = commands.get("evalsha", {}).get("calls", 0) + commands.get("eval", {}).get("calls", 0)
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
        result["envoy_ratelimit"] = {k: v - envoy_before.get(k, 0) for k, v in envoy_after.items() if v - envoy_before.get(k, 0)}
        result["cpu"] = {
            "ratelimit_us_per_decision": round(cpu["service"] * 1e6 / decisions, 1) if decisions else None,
            "ratelimit_cores": round(cpu["service"] / wall, 3),
            "ratelimit_kernel_share": round(service_system / cpu["service"], 3) if cpu["service"] else None,
            "ratelimit_context_switches_per_decision": round(switches / decisions, 2) if decisions else None,
            "redis_us_per_decision": round(cpu["redis"] * 1e6 / decisions, 1) if decisions else None,
            "redis_cores": round(cpu["redis"] / wall, 3),
            "envoy_us_per_request": round(cpu["envoy"] * 1e6 / max(1, requests), 1),
            "envoy_cores": round(cpu["envoy"] / wall, 3),
            "upstream_us_per_request": round(cpu["upstream"] * 1e6 / max(1, requests), 1),
            "upstream_cores": round(cpu["upstream"] / wall, 3),
            "wrk_us_per_request": round(cpu["wrk"] * 1e6 / max(1, requests), 1),
            "wrk_cores": round(cpu["wrk"] / wall, 3),
            "machine_busy_cores": round(cpu["machine"] / wall, 3),
            "other_processes_cores": round((cpu["machine"] - cpu["service"] - cpu["envoy"] - cpu["upstream"] - cpu["redis"] - cpu["wrk"]) / wall, 3),
            "load_average_1m_before": round(load_average, 2),
        }
        if scenario.trivial or scenario.limit_id is None:
            result["cpu"]["ratelimit_process"] = "trivial servicer" if scenario.trivial else "ratelimit_svc, idle (no rate-limit call on this route)"
        filter_errors = result["envoy_ratelimit"].get("filter.error", 0) + result["envoy_ratelimit"].get("filter.failure_mode_allowed", 0)
        if redis_errors or fallbacks:
            warnings.append(f"ratelimit_svc's Redis calls failed ({redis_errors}) and {fallbacks} decisions came from onStoreFailure "
                            "(local): Redis calls per decision is below what the mode costs")
        if filter_errors:
            warnings.append(f"Envoy's ratelimit filter saw {filter_errors} failed calls (timeouts or errors; let through)")
        # wrk counts the requests it completed; up to one per connection was still in flight
        # (decided, not counted) when it stopped.
        if scenario.limit_id is not None and abs(decisions - requests) > self.args.connections + max(2, requests // 1000):
            warnings.append(f"decisions ({decisions}) differ from requests ({requests})")
        if not scenario.calls_service and (decisions or redis_calls):
            warnings.append("ratelimit_svc decided on a route without rateLimits")
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

    def warm_up(self, wanted: list[Scenario]) -> None:
        for name in ("open_direct", "exact_echo", "hybrid_echo"):
            scenario = BY_NAME[name]
            if scenario in wanted:
                self.preflight(scenario)
                self.wrk(scenario, self.args.warmup, f"warmup-{name}")

    def service_cost(self, n: int) -> dict[str, Any]:
        assert self.redis is not None
        return asyncio.run(_service_cost(self.args, self.redis.url, n))


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


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
    ratios = {
        "open_echo_over_open_direct": ratio(rps("open_echo"), rps("open_direct")),
        "exact_echo_over_open_echo": ratio(rps("exact_echo"), rps("open_echo")),
        "hybrid_echo_over_open_echo": ratio(rps("hybrid_echo"), rps("open_echo")),
        "hybrid_echo_over_exact_echo": ratio(rps("hybrid_echo"), rps("exact_echo")),
        "trivial_grpc_echo_over_open_echo": ratio(rps("trivial_grpc_echo"), rps("open_echo")),
        "exact_echo_over_trivial_grpc_echo": ratio(rps("exact_echo"), rps("trivial_grpc_echo")),
        "hybrid_echo_over_trivial_grpc_echo": ratio(rps("hybrid_echo"), rps("trivial_grpc_echo")),
        "exact_deny_over_open_direct": ratio(rps("exact_deny"), rps("open_direct")),
        "hybrid_deny_over_open_direct": ratio(rps("hybrid_deny"), rps("open_direct")),
        "hybrid_deny_over_exact_deny": ratio(rps("hybrid_deny"), rps("exact_deny")),
        "ratelimit_cpu_hybrid_over_exact": ratio(cpu("hybrid_echo", "ratelimit_us_per_decision"), cpu("exact_echo", "ratelimit_us_per_decision")),
        "envoy_cpu_exact_echo_over_open_echo": ratio(cpu("exact_echo", "envoy_us_per_request"), cpu("open_echo", "envoy_us_per_request")),
    }
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
        "conditions": f"one hot key ({args.key}), steady rate, {args.algorithm} limit {STEADY_LIMIT} per {STEADY_WINDOW} "
                      "(far above the rate: the batch is maxBatch), one ratelimit_svc instance (expectedInstances 1)",
    }
    table = [
        {
            "scenario": r["name"],
            "rps": r["rps"],
            "p50_ms": r["latency_ms"]["p50"],
            "p90_ms": r["latency_ms"]["p90"],
            "p99_ms": r["latency_ms"]["p99"],
            "rps_over_open_echo": ratio(r["rps"], rps("open_echo")),
            "redis_calls_per_decision": r["redis"]["calls_per_decision"],
            "redis_evalsha_per_decision": r["redis"]["evalsha_per_decision"],
            "fallback_decisions": r["redis"]["fallback_decisions"],
            "ratelimit_us_per_decision": r["cpu"]["ratelimit_us_per_decision"],
            "ratelimit_cores": r["cpu"]["ratelimit_cores"],
            "redis_us_per_decision": r["cpu"]["redis_us_per_decision"],
            "envoy_us_per_request": r["cpu"]["envoy_us_per_request"],
            "other_processes_cores": r["cpu"]["other_processes_cores"],
            "status_as_expected": r["status_as_expected"],
        }
        for r in results.values()
    ]
    return {"baseline": baseline, "ratios": {k: v for k, v in ratios.items() if v is not None}, "latency_added": added,
            "hybrid_redis_calls_per_decision": hybrid, "aim": aim, "table": table,
            "cpu_per_decision_decomposition": decomposition(results, in_process)}


def machine() -> dict[str, Any]:
    return {
        **describe(("grpcio", "protobuf", "redis", "prometheus-client", "structlog"),
                   ("ratelimit_svc", "gatehouse", "control_plane")),
        "redis_server": command_output("redis-server", "--version"),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=int, default=10, help="seconds per scenario (default: %(default)s)")
    parser.add_argument("--connections", type=int, default=32, help="wrk -c (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="wrk -t (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=2, help="seconds of unmeasured load on open_direct, exact_echo and hybrid_echo first (0: none)")
    parser.add_argument("--quick", action="store_true", help="4 s per scenario, 1 s warm-up, 500 in-process calls per case")
    parser.add_argument("--scenarios", default=",".join(s.name for s in SCENARIOS), help="comma-separated, in this order (default: all)")
    parser.add_argument("--max-batch", type=int, default=100, help="ratelimit_svc's hybrid.maxBatch (default: %(default)s)")
    parser.add_argument("--algorithm", choices=("slidingWindow", "fixedWindow", "tokenBucket"), default="slidingWindow",
                        help="every limit's algorithm (default: %(default)s)")
    parser.add_argument("--key", default="header:x-tenant",
                        help="every limit's key: header:<name> or apiKey (each request sends the same value) or ip (default: %(default)s)")
    parser.add_argument("--ratelimit-timeout", default="200ms", help="the control plane's rateLimit.timeout (Envoy's deadline per decision)")
    parser.add_argument("--redis-timeout", help="ratelimit_svc's redis.timeout (default: the harness's 50ms, also the service's default)")
    parser.add_argument("--in-process-calls", type=int, default=2000, help="calls per case of the in-process ShouldRateLimit measurement (0: skip)")
    parser.add_argument("--workdir", help="where configs, wrk output and logs go (default: a temporary directory, removed unless --keep)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    unknown = [n for n in args.scenarios.split(",") if n and n not in BY_NAME]
    if unknown:
        parser.error(f"unknown scenarios {unknown}; known: {', '.join(BY_NAME)}")
    if args.connections < args.threads:
        parser.error("--connections must be at least --threads")
    if not re.fullmatch(r"ip|apiKey|header:[a-z0-9!#$%&'*+.^_`|~-]+", args.key):
        parser.error("--key must be ip, apiKey or header:<lower-case name> (user needs ext_authz, which this bench does not run)")
    if args.max_batch < 1:
        parser.error("--max-batch must be at least 1")
    if args.quick:
        args.duration, args.warmup, args.in_process_calls = 4, 1, min(args.in_process_calls, 500)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found: apt-get install wrk")
    wanted = [BY_NAME[n] for n in args.scenarios.split(",") if n]
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="gatehouse-ratelimit-"))
    workdir.mkdir(parents=True, exist_ok=True)
    progress(f"work directory {workdir}")
    report: dict[str, Any] = {
        "benchmark": "ratelimit",
        "command": " ".join([Path(sys.executable).name, *sys.argv]) if argv is None else " ".join(argv),
        "settings": {
            "duration_s": args.duration,
            "connections": args.connections,
            "wrk_threads": args.threads,
            "warmup_s": args.warmup,
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
        },
        "machine": machine(),
    }
    started = time.monotonic()
    bench = Bench(args, workdir)
    results: dict[str, dict[str, Any]] = {}
    try:
        progress("starting Redis, ratelimit_svc, control plane, Envoy, upstream")
        report["stack"] = bench.start()
        if args.warmup > 0:
            progress(f"warm-up: {args.warmup:g} s on open_direct, exact_echo and hybrid_echo")
            bench.warm_up(wanted)
        for scenario in wanted:
            results[scenario.name] = bench.run(scenario)
        if args.in_process_calls > 0:
            progress(f"ShouldRateLimit in-process, {args.in_process_calls} calls per case")
            report["service_in_process"] = bench.service_cost(args.in_process_calls)
            for name, case in report["service_in_process"].items():
                progress(f"  {name:<12} CPU: ShouldRateLimit {case['ShouldRateLimit_cpu_us']} us + parse {case['parse_request_cpu_us']} us + "
                         f"serialize {case['serialize_response_cpu_us']} us; Limiter.hit {case['Limiter_hit_cpu_us']} us "
                         f"(wall {case['Limiter_hit_wall_us']} us); "
                         f"redis calls/decision {case['redis_calls_per_decision']}")
    finally:
        bench.stop()
        report["wall_s"] = round(time.monotonic() - started, 1)
        if not args.keep and not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    report.update(summarise(results, report.get("service_in_process", {}), args))
    report["scenarios"] = list(results.values())
    aim = report["aim"]
    if aim["met"] is not None:
        progress(f"hybrid Redis calls per decision {aim['hybrid_redis_calls_per_decision']} (aim {aim['target']}, "
                 f"maxBatch {args.max_batch}): {'met' if aim['met'] else 'NOT met'}")
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
