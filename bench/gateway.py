"""The whole gateway under load: Envoy alone, proxied, authenticated over gRPC and over the
new HTTP path, authenticated + rate-limited in two calls (gRPC ext_authz + ratelimit_svc)
and in one (HTTP ext_authz deciding the limit), cold tokens, a replayed bad token, and
Envoy's own jwt_authn + local_ratelimit as the in-Envoy ceiling, all in one run.

``extAuthz.protocol`` is a control-plane-wide setting, so the run starts **one gateway
stack per configuration, one after the other** (each: control plane, Envoy with one
worker, echo upstream, its Gatehouse services), and every stack measures its own Envoy
direct response first: each scenario's ratio is against the direct-response rps of the
same Envoy, measured minutes (not hours) before it. Shared by all stacks: one Redis
(revocation mirror, rate-limit counters), one RS256 issuer (JWKS files), and one "fast"
upstream, a static Envoy answering 200 itself (the Python echo upstream costs more CPU
than Envoy does, see ``public_echo`` against ``public_fast``).

    stack grpc      extAuthz {protocol: grpc}, rateLimit -> ratelimit_svc (hybrid limits via gRPC)
    stack http      extAuthz {protocol: http}, ext_authz with http.rateLimit, workers: 1
    stack http_w2   the same with workers: 2 (expectedInstances: 2)
    stack native    a static Envoy bootstrap: jwt_authn (JWKS inline) + local_ratelimit per
                    user (bench/kit/jwt_authn.py), no Gatehouse process: not a product mode

Routes (the same Git routes on every control-plane stack):

    /direct         disabled: {status: 200}, auth.required: false       (1: the baseline)
    /public/echo    proxied to tests/harness EchoUpstream (aiohttp)       (2e, Python upstream)
    /public/fast    proxied to the fast upstream, auth.required: false    (2, fast upstream)
    /auth/direct    disabled: {status: 200}, auth.scopes: [bench:read]    (3d, gRPC only: see below)
    /auth/fast      proxied to the fast upstream, auth.scopes             (3 gRPC, 4 HTTP, 6, 7)
    /auth/limited   /auth/fast + rateLimits [{key: user, mode: hybrid, 10^8 per 60 s}]   (5-old, 5-new, 8)
    /public/limited /public/fast + the same limit keyed on ip             (9-old ratelimit_svc, 9-new HTTP check)

Envoy's ratelimit filter only runs on routes with a route action and the HTTP check only
decides limits on routes that are not ``disabled``, so scenario 5 is proxied (to the fast
upstream), and so are 3, 4, 6 and 7, to compare like with like. Every stack records what
``/auth/direct`` answers (``stacks.<name>.probe_auth_direct``): until cb7e8a0 an
authenticated ``disabled`` route answered 503 over HTTP.

Each scenario: a preflight (status, ``x-ratelimit-limit`` on limited routes, 401 without a
token on authenticated ones), ``--warmup`` s of unmeasured load, then one
``wrk -t -c -d --timeout 5s --latency`` run. Around it: utime+stime (``/proc/<pid>/stat``)
of every process **and its descendants** (ext_authz with workers is a supervisor and its
worker processes), Envoy's ext_authz/ratelimit/jwt_authn/local_ratelimit counters, the
services' decision and Redis counters, and the machine's busy CPU. Cold tokens: a new
pre-generated RS256 token per request (bench.kit.wrk.TOKENS_LUA, one slice per wrk thread).

If the one-call path misses an aim, ``--profile`` (on by default then) runs ``py-spy record
--native`` on the ext_authz worker during an extra, unmeasured run of ``auth_limited`` and
summarises where the time goes. ``handler_in_process`` times the HTTP check's handler
(``HttpCheck``) called directly on the same config, Redis and token, without the server.

    .venv/bin/python -m bench.gateway > /tmp/gateway.json
    .venv/bin/python -m bench.gateway --duration 5 --warmup 1 --stacks http,native
    .venv/bin/python -m bench.gateway --threads 2 --connections 64 --duration 20

One JSON document goes to stdout; progress to stderr. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.kit import profiler
from bench.kit.in_process import authz_parts
from bench.kit.envoy_config import address, http_connection_manager
from bench.kit.jwt_authn import jwt_authn_filter, jwt_authn_per_route, local_ratelimit_filter, local_ratelimit_per_route
from bench.kit.machine import cpu_speed_probe, describe, wait_quiet
from bench.kit.metrics import delta, labelled_sums, metric_sum
from bench.kit.processes import children_cpu_seconds, descendants, machine_busy_seconds, tree_cpu_with_reaped
from bench.kit.run import Bench, Parts, Progress, Run, Scenario, add_workdir_arguments, chosen, round_order
from bench.kit.stats import median, ratio
from bench.kit.tokens import AUDIENCE, SCOPE, bad_signature, claims, write_tokens_in_parallel
from bench.kit.wrk import add_wrk_arguments, check_wrk_arguments, require_wrk, run_wrk, write_lua, wrk_command, wrk_settings
from tests.harness.envoy import EnvoyProcess
from tests.harness.ext_authz import ExtAuthzProcess
from tests.harness.gateway import GatewayStack
from tests.harness.http_client import get as http_get
from tests.harness.issuer import TestIssuer
from tests.harness.ports import free_port
from tests.harness.processes import port_open
from tests.harness.ratelimit import RateLimitServiceProcess
from tests.harness.redis import RedisServer
from tests.harness.route_repo import route_doc

ENVOY_CONCURRENCY = 1
"""tests/harness/envoy.py starts every Envoy with --concurrency 1: one worker thread."""
STEADY_LIMIT = 100_000_000
STEADY_WINDOW = "60s"
TODAY = {"five_ratio": 0.07, "authz_us": 280, "limit_us": "160-330"}
"""The brief's 'today' figures (bench.authz warm_direct ÷ open_direct; bench.ratelimit)."""
AIM_RATIO = 0.30
AIM_PYTHON_US = 60.0
NATIVE_LIMIT_ID = "native"
AUTHZ_WARM_US_EARLIER = 233.0
"""bench.authz after its fixes (docs/ext-authz.md, "After acting on the findings"): warm_direct, ext_authz µs CPU per check on this VM."""


progress = Progress("gateway")


# -- metrics --------------------------------------------------------------------------------

WATCHED_METRICS = (
    "gatehouse_authz_decisions_total",
    "gatehouse_ratelimit_hits_total",
    "gatehouse_ratelimit_over_limit_total",
    "gatehouse_ratelimit_redis_calls_total",
    "gatehouse_ratelimit_redis_errors_total",
    "gatehouse_ratelimit_fallback_decisions_total",
    "gatehouse_ratelimit_reservations_total",
)


def scrape(text: str) -> dict[str, float]:
    """The watched samples, summed over workers: ``name{label=value,…}`` → value."""
    return labelled_sums(text, WATCHED_METRICS)


def envoy_counters(envoy: EnvoyProcess) -> dict[str, int]:
    """Envoy's ext_authz, ratelimit, jwt_authn and local_ratelimit filter counters."""
    stats = envoy.stats(r"ext_authz|ratelimit|jwt_authn|local_rl|local_rate_limit")
    return {name: value for name, value in stats.items()
            if not name.startswith(("cluster.gatehouse_ext_authz.", "cluster.gatehouse_ratelimit.", "cluster.ratelimit"))
            or ".ratelimit." in name}


# -- routes and bootstraps ------------------------------------------------------------------


def limit_doc() -> dict[str, Any]:
    return {"key": "user", "algorithm": "slidingWindow", "limit": STEADY_LIMIT, "window": STEADY_WINDOW, "mode": "hybrid"}


def routes() -> list[dict[str, Any]]:
    ok = {"status": 200, "body": "ok"}
    public = {"required": False}
    required = {"scopes": [SCOPE]}
    echo = [{"service": "svc-a", "port": 8080}]
    fast = [{"service": "svc-fast", "port": 8080}]
    return [
        route_doc("direct", {"match": {"pathPrefix": "/direct"}, "disabled": ok, "auth": public}),
        route_doc("public-echo", {"match": {"pathPrefix": "/public/echo"}, "backends": echo, "auth": public}),
        route_doc("public-fast", {"match": {"pathPrefix": "/public/fast"}, "backends": fast, "auth": public}),
        route_doc("auth-direct", {"match": {"pathPrefix": "/auth/direct"}, "disabled": ok, "auth": required}),
        route_doc("auth-fast", {"match": {"pathPrefix": "/auth/fast"}, "backends": fast, "auth": required}),
        route_doc("auth-limited", {"match": {"pathPrefix": "/auth/limited"}, "backends": fast, "auth": required,
                                   "rateLimits": [limit_doc()]}),
        route_doc("public-limited", {"match": {"pathPrefix": "/public/limited"}, "backends": fast, "auth": public,
                                     "rateLimits": [{**limit_doc(), "key": "ip"}]}),
    ]


def native_bootstrap(port: int, admin_port: int, upstream_port: int, issuer: TestIssuer) -> dict[str, Any]:
    """jwt_authn (JWKS inline, as the control plane would deliver it) + local_ratelimit per user
    (``x-user-id`` from the verified ``sub``), proxied to the fast upstream; ``/direct`` is this
    Envoy's own baseline."""
    cluster = {
        "name": "fast",
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {"cluster_name": "fast", "endpoints": [{"lb_endpoints": [{"endpoint": {"address": address(upstream_port)}}]}]},
    }
    direct = {"match": {"prefix": "/direct"}, "direct_response": {"status": 200, "body": {"inline_string": "ok"}},
              "typed_per_filter_config": jwt_authn_per_route(disabled=True)}
    limited = {
        "match": {"prefix": "/auth/limited"},
        "route": {"cluster": "fast", "timeout": "5s"},
        "typed_per_filter_config": {**jwt_authn_per_route(),
                                    **local_ratelimit_per_route(STEADY_LIMIT, 60.0, key_header="x-user-id", stat_prefix=NATIVE_LIMIT_ID)},
    }
    filters = [jwt_authn_filter(issuer.issuer, [AUDIENCE], json.dumps(issuer.jwks())), local_ratelimit_filter(NATIVE_LIMIT_ID)]
    listener = {"name": "native", "address": address(port),
                "filter_chains": [{"filters": [http_connection_manager("native", [direct, limited], filters)]}]}
    return {"admin": {"address": address(admin_port)}, "static_resources": {"listeners": [listener], "clusters": [cluster]}}


# -- scenarios ------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class GatewayScenario(Scenario):
    stack: str
    number: str
    """The brief's scenario number: 1, 2, 3, 4, 5-old, 5-new, 6, 7, 8 (3p/4p: proxied variants)."""
    token: str = "none"
    """none | warm (one valid RS256 token, repeated) | cold (a new token per request) | bad (replayed bad signature)"""
    limited: bool = False

    @property
    def key(self) -> str:
        return f"{self.stack}.{self.name}"


SCENARIOS = [
    GatewayScenario("direct", "/direct", "Envoy direct response (baseline of the gRPC stack)", stack="grpc", number="1"),
    GatewayScenario("public_fast", "/public/fast", "public route proxied to the fast upstream (static Envoy)", stack="grpc", number="2"),
    GatewayScenario("auth_direct", "/auth/direct", "authenticated, warm token, gRPC ext_authz, direct response (bench.authz's warm_direct)", stack="grpc", number="3d", token="warm"),
    GatewayScenario("auth_fast", "/auth/fast", "authenticated, warm token, gRPC ext_authz, proxied to the fast upstream", stack="grpc", number="3", token="warm"),
    GatewayScenario("auth_limited", "/auth/limited", "authenticated + user limit (hybrid): two calls, gRPC ext_authz then ratelimit_svc over gRPC", stack="grpc", number="5-old", token="warm", limited=True),
    GatewayScenario("public_limited", "/public/limited", "public + IP limit (hybrid): Envoy's ratelimit filter, ratelimit_svc over gRPC", stack="grpc", number="9-old", limited=True),
    GatewayScenario("direct", "/direct", "Envoy direct response (baseline of the HTTP stack)", stack="http", number="1"),
    GatewayScenario("public_echo", "/public/echo", "public route proxied to tests/harness EchoUpstream (Python/aiohttp)", stack="http", number="2e"),
    GatewayScenario("public_fast", "/public/fast", "public route proxied to the fast upstream (static Envoy)", stack="http", number="2"),
    GatewayScenario("auth_fast", "/auth/fast", "authenticated, warm token, HTTP ext_authz, proxied to the fast upstream", stack="http", number="4", token="warm"),
    GatewayScenario("auth_limited", "/auth/limited", "authenticated + user limit (hybrid): one call, HTTP ext_authz decides the token and the limit", stack="http", number="5-new", token="warm", limited=True),
    GatewayScenario("public_limited", "/public/limited", "public + IP limit (hybrid): the HTTP check with no token (extAuthz.publicRouteLimits)", stack="http", number="9-new", limited=True),
    GatewayScenario("cold_rs256", "/auth/fast", "a new RS256 token per request, HTTP ext_authz, proxied to the fast upstream", stack="http", number="6", token="cold"),
    GatewayScenario("bad_token", "/auth/fast", "one token with a broken signature, replayed: 401 from HTTP ext_authz", 401, stack="http", number="7", token="bad"),
    GatewayScenario("direct", "/direct", "Envoy direct response (baseline of the workers: 2 stack)", stack="http_w2", number="1"),
    GatewayScenario("auth_limited", "/auth/limited", "5-new with ext_authz workers: 2 (expectedInstances: 2)", stack="http_w2", number="5-new-w2", token="warm", limited=True),
    GatewayScenario("direct", "/direct", "Envoy direct response (baseline of the static jwt_authn Envoy)", stack="native", number="1"),
    GatewayScenario("jwt_local_rl", "/auth/limited", "Envoy jwt_authn (JWKS inline) + local_ratelimit per user, proxied to the fast upstream: not a product mode", stack="native", number="8", token="warm", limited=True),
]
STACKS = ("grpc", "http", "http_w2", "native")
STACK_NOTES = {
    "grpc": "control plane extAuthz {protocol: grpc}, rateLimit -> ratelimit_svc (gRPC); ext_authz workers: 1",
    "http": "control plane extAuthz {protocol: http}; ext_authz workers: 1 with http.rateLimit (the limit is decided in the check); "
            "rateLimit.address is a dead 127.0.0.1:1 (public routes' limits go to the HTTP check too: ratelimit_svc is never called)",
    "http_w2": "as http, ext_authz workers: 2 (a supervisor and two worker processes; expectedInstances: 2)",
    "native": "static Envoy bootstrap (no control plane): jwt_authn with the JWKS inline + local_ratelimit keyed on x-user-id",
}


@dataclass
class Stack:
    name: str
    listener_port: int
    envoy: EnvoyProcess
    processes: dict[str, int]
    """role → pid: envoy, ext_authz, ratelimit_svc, control_plane, upstream_echo, upstream_fast, redis"""
    parts: Parts
    """What this stack started, stopped when its scenarios are done."""
    gateway: GatewayStack | None = None
    authz: ExtAuthzProcess | None = None
    ratelimit: RateLimitServiceProcess | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def stop(self) -> None:
        self.parts.stop()


class GatewayBench(Bench):
    def __init__(self, args: argparse.Namespace, run: Run) -> None:
        super().__init__(args, run)
        workdir = self.workdir
        self.issuer = TestIssuer(audience=AUDIENCE)
        self.static_lua, self.tokens_lua = write_lua(workdir)
        self.redis: RedisServer | None = None
        self.fast: EnvoyProcess | None = None
        self.fast_port = 0
        self.cold_files: list[Path] = []
        """One file of distinct tokens per round: a token sent in round 1 would be a cache hit in round 2."""
        self.round = 0
        ttl = 4 * 3600
        self.warm_token = self.issuer.token("warm-user", ttl=ttl, **claims())
        self.headers = {
            "none": None,
            "warm": f"Bearer {self.warm_token}",
            "bad": f"Bearer {bad_signature(self.issuer.token('mallory', ttl=ttl, **claims()))}",
        }
        self.jwks_path = self.issuer.write_jwks(workdir / "jwks.json")

    # -- shared processes -----------------------------------------------------------------

    def start_shared(self) -> dict[str, Any]:
        self.redis = self.parts.add(RedisServer.start(log_dir=self.workdir / "redis"))
        self.fast, self.fast_port = self.start_fast_upstream()
        assert self.redis.process is not None
        return {"redis_pid": self.redis.process.pid, "fast_upstream_pid": self.fast.pid, "fast_upstream_port": self.fast_port}

    def shared_pids(self) -> dict[str, int]:
        assert self.redis is not None and self.redis.process is not None and self.fast is not None
        return {"redis": self.redis.process.pid, "upstream_fast": self.fast.pid}

    # -- stacks ---------------------------------------------------------------------------

    def authz_config(self, workers: int) -> dict[str, Any]:
        assert self.redis is not None
        return {
            "issuers": [{"issuer": self.issuer.issuer, "audiences": [AUDIENCE], "requireJti": True, "jwksFile": str(self.jwks_path)}],
            "revocation": {"redisUrl": self.redis.url},
            "workers": workers,
        }

    def start_stack(self, name: str) -> Stack:
        started = time.monotonic()
        parts = Parts(progress)
        if name == "native":
            port, admin = free_port(), free_port()
            envoy = parts.add(EnvoyProcess.start(native_bootstrap(port, admin, self.fast_port, self.issuer), log_dir=self.workdir / "native",
                                                 admin_port=admin, name="envoy-native"))
            try:
                envoy.wait_live(30)
                envoy.process.wait_until(lambda: port_open(port), 30, f"native listener on :{port}")
            except BaseException:
                parts.stop()
                raise
            stack = Stack(name, port, envoy, {"envoy": envoy.pid, **self.shared_pids()}, parts)
            stack.info = {"start_s": round(time.monotonic() - started, 2), "bootstrap": str(envoy.config_path), "note": STACK_NOTES[name]}
            return stack
        assert self.redis is not None
        directory = self.workdir / name
        workers = 2 if name == "http_w2" else 1
        ratelimit = None
        if name == "grpc":
            authz = parts.add(ExtAuthzProcess(directory / "authz", self.authz_config(workers), transport="grpc"))
            ratelimit = RateLimitServiceProcess(directory / "ratelimit", redis_url=self.redis.url, extra={"hybrid": {"maxBatch": self.args.max_batch}})
            extra: dict[str, Any] = {"extAuthz": {"address": [authz.address], "protocol": "grpc"},
                                     "rateLimit": {"address": ratelimit.address, "timeout": "200ms"}}
        else:
            rate_limit = {"redis": {"url": self.redis.url, "timeout": self.args.redis_timeout}, "expectedInstances": workers,
                          "hybrid": {"maxBatch": self.args.max_batch}}
            authz = parts.add(ExtAuthzProcess(directory / "authz", self.authz_config(workers), transport="http", rate_limit=rate_limit))
            extra = {"extAuthz": {"address": [authz.check_address], "protocol": "http"}, "rateLimit": {"address": "127.0.0.1:1"}}
        gateway = parts.add(GatewayStack(directory, upstreams=("svc-a",), poll_interval="60s", control_plane_extra=extra))
        if ratelimit is not None:
            parts.add(ratelimit)
        gateway.commit_routes({"routes.yaml": routes()})
        try:
            if name == "grpc":
                authz.start()
            gateway.start_upstreams()
            gateway.set_endpoints({"svc-a": [gateway.upstreams["svc-a"].address], "svc-fast": [f"127.0.0.1:{self.fast_port}"]})
            gateway.start(wait_path="/direct")
            if ratelimit is not None:
                ratelimit.start(gateway.control_plane.xds_port)
            else:
                authz.use_control_plane(gateway.control_plane.xds_port)
                authz.start(timeout=60)
            for path in ("/public/echo", "/public/fast"):
                gateway.wait_status(path, 200)
            for path in ("/auth/fast", "/auth/limited"):
                gateway.wait_status(path, 401, timeout=20)
            if name == "grpc":
                gateway.wait_status("/auth/direct", 401, timeout=20)
        except BaseException:
            parts.stop()
            raise
        assert gateway.envoy is not None and authz.process is not None and gateway.control_plane.process is not None
        pids = {"envoy": gateway.envoy.pid, "ext_authz": authz.process.pid, "control_plane": gateway.control_plane.process.pid,
                "upstream_echo": gateway.upstreams["svc-a"].pid, **self.shared_pids()}
        if ratelimit is not None and ratelimit.process is not None:
            pids["ratelimit_svc"] = ratelimit.process.pid
        stack = Stack(name, gateway.listener_port, gateway.envoy, pids, parts, gateway, authz, ratelimit)
        stack.info = {
            "start_s": round(time.monotonic() - started, 2),
            "note": STACK_NOTES[name],
            "ext_authz_workers": workers,
            "ext_authz_worker_pids": descendants(authz.process.pid),
            "ext_authz_config": authz.config,
            "control_plane_extra": extra,
            "probe_auth_direct": self.probe_disabled_route(stack),
        }
        return stack

    def probe_disabled_route(self, stack: Stack) -> dict[str, Any]:
        """``/auth/direct`` (``disabled: {status: 200}`` with auth required) with a valid token,
        a missing one and a bad one: 200/401/401 on both transports (over HTTP it was 503 for
        all three until cb7e8a0, when the route got no ``x-gatehouse-route``)."""
        answers = {}
        for kind in ("warm", "none", "bad"):
            header = self.headers[kind]
            reply = http_get(stack.listener_port, "/auth/direct", headers={"authorization": header} if header else {})
            answers[kind] = {"status": reply.status, "body": reply.body[:300].decode(errors="replace")}
        log = ""
        if stack.authz is not None and stack.authz.process is not None:
            log = next((line for line in reversed(stack.authz.process.log_tail(200).splitlines()) if "authz_route_unknown" in line), "")
        return {"answers": answers, "ext_authz_log_authz_route_unknown": log or None}

    # -- one request, one wrk run -----------------------------------------------------------

    def preflight(self, stack: Stack, scenario: GatewayScenario) -> dict[str, Any]:
        header = self.headers["warm"] if scenario.token == "cold" else self.headers[scenario.token]
        reply = http_get(stack.listener_port, scenario.path, headers={"authorization": header} if header else {})
        if reply.status != scenario.expect_status:
            raise RuntimeError(f"{scenario.key}: {scenario.path} answered {reply.status}, expected {scenario.expect_status}: {reply.body[:300]!r}")
        seen = {k: v for k, v in reply.headers.items() if k.startswith("x-ratelimit") or k in ("x-upstream", "www-authenticate")}
        if scenario.limited and "x-ratelimit-limit" not in reply.headers:
            raise RuntimeError(f"{scenario.key}: no x-ratelimit-limit on the answer: the limit is not in force ({reply.headers})")
        if scenario.token != "none":
            anonymous = http_get(stack.listener_port, scenario.path)
            if anonymous.status != 401:
                raise RuntimeError(f"{scenario.key}: without a token {scenario.path} answered {anonymous.status}, expected 401")
        return {"status": reply.status, "headers": seen}

    def wrk(self, stack: Stack, scenario: GatewayScenario, duration: int, log_name: str, *, warmup: bool = False) -> dict[str, Any]:
        url = f"http://127.0.0.1:{stack.listener_port}{scenario.path}"
        load = {"threads": self.args.threads, "connections": self.args.connections, "duration": duration}
        if scenario.token == "cold" and not warmup:
            argv = wrk_command(url, **load, script=self.tokens_lua, script_args=(str(self.cold_files[self.round]), str(self.args.threads)))
        else:
            header = self.headers["warm" if scenario.token == "cold" else scenario.token]
            argv = wrk_command(url, **load, script=self.static_lua, headers=(f"Authorization: {header}",) if header else ())
        return run_wrk(argv, duration, self.workdir, log_name, stdev=False)

    def service_metrics(self, stack: Stack) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        if stack.authz is not None:
            out["ext_authz"] = scrape(stack.authz.metrics_text())
        if stack.ratelimit is not None:
            out["ratelimit_svc"] = scrape(stack.ratelimit.metrics_text())
        return out

    def snapshot(self, stack: Stack) -> dict[str, Any]:
        return {
            "cpu": {role: tree_cpu_with_reaped(pid) for role, pid in stack.processes.items()},
            "wrk": children_cpu_seconds(),
            "machine": machine_busy_seconds(),
            "envoy": envoy_counters(stack.envoy),
            "metrics": self.service_metrics(stack),
            "clock": time.monotonic(),
        }

    def run(self, stack: Stack, scenario: GatewayScenario, *, profile_to: Path | None = None) -> dict[str, Any]:
        duration = self.args.profile_duration if profile_to is not None else self.args.duration
        pre = self.preflight(stack, scenario)
        if self.args.warmup > 0:
            self.wrk(stack, scenario, self.args.warmup, f"{scenario.key}-warmup", warmup=True)
        sampler = None
        if profile_to is not None:
            assert stack.authz is not None and stack.authz.process is not None
            workers = descendants(stack.authz.process.pid)
            target = workers[0] if workers else stack.authz.process.pid
            sampler = profiler.Profiler(target, profile_to, self.args.profile_rate, summarise_profile, threads=False, duration_s=duration + 1,
                                        option="--profile")
        speed = cpu_speed_probe()
        before = self.snapshot(stack)
        load_average = os.getloadavg()[0]
        load = self.wrk(stack, scenario, duration, scenario.key + ("-profiled" if sampler else ""))
        after = self.snapshot(stack)
        wall = after["clock"] - before["clock"]
        requests = max(1, load["requests"])
        result: dict[str, Any] = {"name": scenario.name, "stack": stack.name, "number": scenario.number, "path": scenario.path,
                                  "description": scenario.description, "token": scenario.token, "expect_status": scenario.expect_status,
                                  "preflight": pre, **load}
        cpu: dict[str, Any] = {}
        known = 0.0
        for role in stack.processes:
            seconds = after["cpu"][role]["total"] - before["cpu"][role]["total"]
            known += seconds
            cpu[role] = {"us_per_request": round(seconds * 1e6 / requests, 1), "cores": round(seconds / wall, 3)}
            if role == "ext_authz" and len(after["cpu"][role]["per_pid"]) > 1:
                cpu[role]["per_process_cores"] = {str(pid): round((s - before["cpu"][role]["per_pid"].get(pid, 0)) / wall, 3)
                                                  for pid, s in after["cpu"][role]["per_pid"].items()}
        wrk_cpu = after["wrk"] - before["wrk"]
        machine = after["machine"] - before["machine"]
        cpu["wrk"] = {"us_per_request": round(wrk_cpu * 1e6 / requests, 1), "cores": round(wrk_cpu / wall, 3)}
        cpu["machine_busy_cores"] = round(machine / wall, 3)
        cpu["other_processes_cores"] = round((machine - known - wrk_cpu) / wall, 3)
        cpu["load_average_1m_before"] = round(load_average, 2)
        cpu["speed_probe_ns_per_iteration_before"] = speed
        result["cpu"] = cpu
        result["envoy_counters"] = delta(before["envoy"], after["envoy"], 3)
        services: dict[str, Any] = {}
        for service, counters in after["metrics"].items():
            services[service] = delta(before["metrics"].get(service, {}), counters, 3)
        result["service_counters"] = services
        self.decisions(result, services, requests)
        result["status_as_expected"] = scenario.status_as_expected(load)
        warnings = []
        if not result["status_as_expected"]:
            warnings.append(f"{load['status_errors']} non-2xx/3xx answers, expected {requests if scenario.expect_status >= 400 else 0}")
        if load["socket_errors"]:
            warnings.append(f"socket errors {load['socket_errors']}")
        for service, moved in services.items():
            if metric_sum(moved, "gatehouse_ratelimit_redis_errors_total") or metric_sum(moved, "gatehouse_ratelimit_fallback_decisions_total"):
                warnings.append(f"{service}: Redis errors or fallback decisions during the run")
        envoy_errors = {k: v for k, v in result["envoy_counters"].items() if k.endswith((".error", ".failure_mode_allowed"))}
        if envoy_errors:
            warnings.append(f"Envoy filter errors {envoy_errors}")
        if scenario.token == "cold":
            exhausted = load["requests"] >= self.args.cold_tokens - self.args.connections
            result["cold"] = {"tokens": self.args.cold_tokens, "exhausted": exhausted,
                              "note": "each wrk thread stops when its slice is used up; no token is sent twice (a file of its own per round); "
                                      "the warm-up used the warm token"}
            if exhausted:
                warnings.append("the cold token list ran out before --duration: rps is understated; raise --cold-tokens")
        if warnings:
            result["warning"] = "; ".join(warnings)
        if sampler is not None:
            result["profiled"] = True
            result["profile"] = sampler.stop()
        c = result["cpu"]
        progress(
            f"  {scenario.key:<22} {load['rps']:>9.1f} req/s  p50 {load['latency_ms']['p50']:.2f} ms  p99 {load['latency_ms']['p99']:.2f} ms  "
            f"envoy {c['envoy']['us_per_request']} us  ext_authz {c.get('ext_authz', {}).get('us_per_request', '-')} us  "
            f"ratelimit_svc {c.get('ratelimit_svc', {}).get('us_per_request', '-')} us  other {c['other_processes_cores']} cores"
            + (f"  WARNING {result['warning']}" if warnings else "")
        )
        return result

    @staticmethod
    def decisions(result: dict[str, Any], services: dict[str, Any], requests: int) -> None:
        """Decisions counted by each service and CPU per decision (not per request)."""
        counted: dict[str, Any] = {}
        authz = services.get("ext_authz")
        if authz is not None:
            checks = metric_sum(authz, "gatehouse_authz_decisions_total")
            hits = metric_sum(authz, "gatehouse_ratelimit_hits_total")
            counted["ext_authz_checks"] = int(checks)
            counted["ext_authz_limit_hits"] = int(hits)
            counted["ext_authz_redis_calls"] = int(metric_sum(authz, "gatehouse_ratelimit_redis_calls_total"))
            if checks:
                result["cpu"]["ext_authz"]["us_per_decision"] = round(result["cpu"]["ext_authz"]["us_per_request"] * requests / checks, 1)
        rl = services.get("ratelimit_svc")
        if rl is not None:
            hits = metric_sum(rl, "gatehouse_ratelimit_hits_total")
            counted["ratelimit_svc_hits"] = int(hits)
            counted["ratelimit_svc_redis_calls"] = int(metric_sum(rl, "gatehouse_ratelimit_redis_calls_total"))
            if hits:
                result["cpu"]["ratelimit_svc"]["us_per_decision"] = round(result["cpu"]["ratelimit_svc"]["us_per_request"] * requests / hits, 1)
        result["decisions"] = counted


# -- profile -------------------------------------------------------------------------------


# Innermost frame naming a category wins.
CATEGORIES: list[tuple[str, tuple[str, ...]]] = [
    ("gc", ("gc_collect", "(gc)", "collect_generations")),
    ("crypto (warm: sha256 of the token for the cache key)", ("jwt/", "cryptography/", "libcrypto", "_rust.abi3", "_hashlib")),
    ("prometheus_metrics", ("prometheus_client/",)),
    ("structlog_context", ("structlog/", "contextvars", "servicekit/logs.py")),
    ("redis_client", ("redis/",)),
    ("limiter", ("limiter/",)),
    ("authorizer_token", ("ext_authz/service.py", "ext_authz/tokens/verifier.py", "ext_authz/tokens/cache.py", "ext_authz/tokens/requirements.py",
                          "ext_authz/revocation", "ext_authz/tokens/claim_headers.py")),
    ("http_check_handler", ("ext_authz/check/http_check.py",)),
    ("http1_server_httptools", ("servicekit/http1_server.py", "httptools")),
    ("asyncio_tasks", ("asyncio/", "_asyncio", "task_step", "task_wakeup", "_asynciomodule")),
    ("uvloop_libuv", ("uvloop", "uv__", "libuv", "loop.cpython")),
]
SYSCALLS = ("sendmsg", "recvmsg", "recv", "send", "write", "read", "writev", "readv", "epoll_ctl", "syscall", "getpid", "__write",
            "__libc_write", "__libc_read", "__libc_recv", "__libc_send", "__send", "__recv", "__libc_sendmsg", "__libc_recvmsg")
IDLE = ("epoll_wait", "epoll_pwait", "__GI_epoll_wait", "select", "poll")


QUEUE_WAITS = ("_queue_SimpleQueue_get", "pthread_cond_timedwait", "pthread_cond_wait")
"""Anywhere on the stack: an executor thread waiting on its queue."""


def summarise_profile(path: Path) -> dict[str, Any]:
    """bench.kit.profiler.summarise_profile with the HTTP check's categories and ``inside_HttpCheck``:
    shares of the samples where the thread ran (an idle ``epoll_wait`` leaf counted apart);
    native frames named by themselves."""
    return profiler.summarise_profile(
        path, CATEGORIES, ("inside_HttpCheck", ("HttpCheck.__call__ ", "HttpCheck._check ")), inclusive_top=40,
        queue_waits=QUEUE_WAITS, idle_leaves=IDLE, gil_waits=False, syscall_leaves=SYSCALLS, syscall_prefixes=("__libc_", "__GI___libc"),
        frame=lambda f: profiler.frame_name(f, ("site-packages/", "lib/python3.11/", "lib/python3"), bare=True), keep_bare_frames=True,
        other="other (interpreter, libc)",
    )


# -- the handler alone ---------------------------------------------------------------------


async def _handler_cost(config_path: Path, authorization: str, n: int, log_path: Path) -> dict[str, Any]:
    """``HttpCheck`` (the handler Http1Server runs per check) called in this process, on the
    http stack's config (keys, revocation mirror on the same Redis, limiter with the same
    Redis timeout and maxBatch), with and without the hybrid user limit; awaited directly and
    as a task per check, as the server does. CPU from ``time.process_time``."""
    from ext_authz.denial_audit import DenialAudit
    from ext_authz.check.http_check import HttpCheck
    from ext_authz.check.route_table import RouteTable
    from ext_authz.check.steps import CheckParts
    from servicekit.check_contract import ROUTE_HEADER
    from limiter.config import build_limiter
    from servicekit.audit import LogAuditSink
    from servicekit.http1_server import Request
    from servicekit.protos.gatehouse.policy.v1 import policy_pb2

    async with authz_parts(config_path, log_path) as parts:
        config = parts.config
        assert config.http is not None and config.http.rate_limit is not None and parts.mirror is not None
        limiter = build_limiter(config.http.rate_limit.redis, config.http.rate_limit.hybrid, expected_instances=1)
        authorizer = parts.authorizer
        try:
            table = RouteTable(CheckParts(authorizer, DenialAudit(LogAuditSink()), limiter))
            plain = policy_pb2.RoutePolicy(route="bench/in-process-auth")
            limited = policy_pb2.RoutePolicy(route="bench/in-process-limited", limits=[policy_pb2.Limit(
                id="bench/in-process-limited#0", key="user", algorithm="slidingWindow", limit=STEADY_LIMIT, window_ms=60_000, mode="hybrid")])
            for policy in (plain, limited):
                policy.auth.SetInParent()
                policy.auth.scopes.append(SCOPE)
            table.replace([plain, limited])
            check = HttpCheck(table)
            results: dict[str, Any] = {}
            for case, route in (("auth_only", plain.route), ("auth_and_user_limit_hybrid", limited.route)):
                headers = {"host": "gatehouse_ext_authz", "authorization": authorization, "x-request-id": str(uuid.uuid4()),
                           ROUTE_HEADER: route, "x-forwarded-for": "127.0.0.1", "content-length": "0",
                           "x-envoy-expected-rq-timeout-ms": "250"}
                request = Request("GET", "/check/auth/limited", headers)
                first = await check(request)
                assert first.startswith(b"HTTP/1.1 200"), first[:200]
                for _ in range(200):
                    await check(request)
                cpu, wall = time.process_time(), time.perf_counter()
                for _ in range(n):
                    await check(request)
                direct = ((time.process_time() - cpu) * 1e6 / n, (time.perf_counter() - wall) * 1e6 / n)
                loop = asyncio.get_running_loop()
                cpu, wall = time.process_time(), time.perf_counter()
                for _ in range(n):
                    await loop.create_task(check(request))
                tasked = ((time.process_time() - cpu) * 1e6 / n, (time.perf_counter() - wall) * 1e6 / n)
                results[case] = {"n": n, "awaited_cpu_us": round(direct[0], 1), "awaited_wall_us": round(direct[1], 1),
                                 "as_task_cpu_us": round(tasked[0], 1), "as_task_wall_us": round(tasked[1], 1)}
            return results
        finally:
            await limiter.close()


def handler_cost(config_path: Path, authorization: str, n: int, log_path: Path) -> dict[str, Any]:
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_handler_cost(config_path, authorization, n, log_path))


# -- summary -------------------------------------------------------------------------------


ROLES = ("envoy", "ext_authz", "ratelimit_svc", "control_plane", "upstream_fast", "upstream_echo", "redis", "wrk")


def _median(values: list[float]) -> float | None:
    return median(values, 1)


def combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One scenario over its rounds: requests/s the highest, each percentile the lowest (other
    processes on a shared machine only slow a run down), CPU per request the median."""
    first = runs[0]
    cpu: dict[str, Any] = {}
    for role in ROLES:
        per_request = [r["cpu"][role]["us_per_request"] for r in runs if role in r["cpu"]]
        if not per_request:
            continue
        cpu[role] = {"us_per_request": _median(per_request),
                     "cores": _median([r["cpu"][role]["cores"] for r in runs if role in r["cpu"]])}
        per_decision = [r["cpu"][role]["us_per_decision"] for r in runs if "us_per_decision" in r["cpu"].get(role, {})]
        if per_decision:
            cpu[role]["us_per_decision"] = _median(per_decision)
    warnings = [f"round {r['round']}: {r['warning']}" for r in runs if "warning" in r]
    return {
        "stack": first["stack"], "number": first["number"], "path": first["path"], "description": first["description"],
        "rounds": len(runs),
        "rps": max(r["rps"] for r in runs),
        "rps_per_round": [r["rps"] for r in runs],
        "p50_ms": min(r["latency_ms"]["p50"] for r in runs),
        "p99_ms": min(r["latency_ms"]["p99"] for r in runs),
        "p99_ms_per_round": [r["latency_ms"]["p99"] for r in runs],
        "cpu": cpu,
        "other_processes_cores_per_round": [r["cpu"]["other_processes_cores"] for r in runs],
        "status_as_expected": all(r["status_as_expected"] for r in runs),
        **({"warnings": warnings} if warnings else {}),
    }


def summarise(results: dict[str, list[dict[str, Any]]], profile: dict[str, Any] | None) -> dict[str, Any]:
    combined = {key: combine(runs) for key, runs in results.items() if runs}
    baselines = {stack: combined[f"{stack}.direct"]["rps"] for stack in STACKS if f"{stack}.direct" in combined}
    table = []
    for key, c in combined.items():
        c["ratio_to_direct"] = ratio(c["rps"], baselines.get(c["stack"]))
        proxied = combined.get(f"{c['stack']}.public_fast")
        if proxied is not None and c["path"] not in ("/direct", "/auth/direct", "/public/echo", "/public/fast"):
            c["ratio_to_public_fast"] = ratio(c["rps"], proxied["rps"])
        for run in results[key]:  # each run against its own round's baseline too
            base = next((r["rps"] for r in results.get(f"{c['stack']}.direct", []) if r["round"] == run["round"]), None)
            run["ratio_to_direct_same_round"] = ratio(run["rps"], base)
        cpu = c["cpu"]
        upstream = "upstream_echo" if "echo" in c["path"] else "upstream_fast" if c["path"] != "/direct" and "direct" not in c["path"] else None
        table.append({
            "scenario": key, "number": c["number"], "rps": c["rps"], "ratio_to_direct": c["ratio_to_direct"],
            "ratio_to_public_fast": c.get("ratio_to_public_fast"),
            "ratio_to_direct_per_round": [r["ratio_to_direct_same_round"] for r in results[key]],
            "p50_ms": c["p50_ms"], "p99_ms": c["p99_ms"],
            "envoy_us_per_request": cpu["envoy"]["us_per_request"],
            "ext_authz_us_per_request": cpu.get("ext_authz", {}).get("us_per_request"),
            "ratelimit_svc_us_per_request": cpu.get("ratelimit_svc", {}).get("us_per_request"),
            "control_plane_us_per_request": cpu.get("control_plane", {}).get("us_per_request"),
            "upstream": upstream,
            "upstream_us_per_request": cpu.get(upstream, {}).get("us_per_request") if upstream else None,
            "redis_us_per_request": cpu.get("redis", {}).get("us_per_request"),
            "ext_authz_cores": cpu.get("ext_authz", {}).get("cores"),
            "envoy_cores": cpu["envoy"]["cores"],
            "other_processes_cores_per_round": c["other_processes_cores_per_round"],
            "status_as_expected": c["status_as_expected"],
            **({"warnings": c["warnings"]} if "warnings" in c else {}),
        })

    def python_us(key: str) -> dict[str, Any] | None:
        c = combined.get(key)
        if c is None:
            return None
        cpu = c["cpu"]
        authz = cpu.get("ext_authz", {}).get("us_per_request")
        rl = cpu.get("ratelimit_svc", {}).get("us_per_request")
        return {"ext_authz_us_per_request": authz, "ext_authz_us_per_decision": cpu.get("ext_authz", {}).get("us_per_decision"),
                "ratelimit_svc_us_per_request": rl, "ratelimit_svc_us_per_decision": cpu.get("ratelimit_svc", {}).get("us_per_decision"),
                "python_total_us_per_request": round((authz or 0) + (rl or 0), 1), "envoy_us_per_request": cpu["envoy"]["us_per_request"],
                "redis_us_per_request": cpu.get("redis", {}).get("us_per_request"), "rps": c["rps"], "ratio_to_direct": c["ratio_to_direct"],
                "ratio_to_public_fast": c.get("ratio_to_public_fast")}

    five_new, five_old, five_w2 = python_us("http.auth_limited"), python_us("grpc.auth_limited"), python_us("http_w2.auth_limited")
    aims: dict[str, Any] = {}
    if five_new is not None:
        aims["five_new_ratio_to_direct"] = {"value": five_new["ratio_to_direct"], "aim": f">= {AIM_RATIO}", "today": TODAY["five_ratio"],
                                            "met": bool(five_new["ratio_to_direct"] and five_new["ratio_to_direct"] >= AIM_RATIO)}
        aims["five_new_python_us_per_decision"] = {
            "value": five_new["python_total_us_per_request"], "aim": f"<= {AIM_PYTHON_US}",
            "today": f"~{TODAY['authz_us']} us authz + {TODAY['limit_us']} us limit",
            "met": five_new["python_total_us_per_request"] <= AIM_PYTHON_US}
    aims["aims_met"] = bool(aims) and all(v["met"] for v in aims.values() if isinstance(v, dict))
    comparison: dict[str, Any] = {"five_new": five_new, "five_old": five_old, "five_new_workers2": five_w2}
    if five_new and five_old:
        comparison["five_new_over_five_old_rps"] = ratio(five_new["rps"], five_old["rps"])
        comparison["five_old_over_five_new_python_cpu"] = ratio(five_old["python_total_us_per_request"], five_new["python_total_us_per_request"])
    if five_new and five_w2:
        comparison["workers2_over_workers1_rps"] = ratio(five_w2["rps"], five_new["rps"])
    native = combined.get("native.jwt_local_rl")
    if native and five_new:
        comparison["five_new_over_native_rps"] = ratio(five_new["rps"], native["rps"])
    envoy = {key: c["cpu"]["envoy"]["us_per_request"] for key, c in combined.items()}

    def added(a: str, b: str) -> float | None:
        return round(envoy[a] - envoy[b], 1) if a in envoy and b in envoy else None

    envoy_steps = {
        "note": "Envoy's own CPU per request (its one worker is where the requests/s stop): what each step adds, same stack",
        "direct_response": {s_: envoy.get(f"{s_}.direct") for s_ in STACKS},
        "proxy_to_fast_upstream_adds": {s_: added(f"{s_}.public_fast", f"{s_}.direct") for s_ in ("grpc", "http")},
        "grpc_ext_authz_call_adds": added("grpc.auth_fast", "grpc.public_fast"),
        "http_ext_authz_call_adds": added("http.auth_fast", "http.public_fast"),
        "ratelimit_grpc_call_adds": added("grpc.auth_limited", "grpc.auth_fast"),
        "limit_in_the_http_check_adds": added("http.auth_limited", "http.auth_fast"),
        "jwt_authn_and_local_ratelimit_add": added("native.jwt_local_rl", "native.direct"),
        "envoy_bound_ratio_to_direct": {
            key: ratio(envoy.get(f"{c['stack']}.direct"), envoy[key]) for key, c in combined.items() if not key.endswith(".direct")},
        "envoy_bound_ratio_note": "direct's Envoy µs ÷ the scenario's: the highest ratio_to_direct the scenario could reach if every "
                                  "other process were free and Envoy's one worker the only limit",
    }
    scale = None
    grpc_warm = combined.get("grpc.auth_direct", {}).get("cpu", {}).get("ext_authz", {}).get("us_per_request")
    if grpc_warm:
        scale = {"factor": round(AUTHZ_WARM_US_EARLIER / grpc_warm, 3),
                 "note": f"bench.authz's warm_direct after its fixes (docs/ext-authz.md) was {AUTHZ_WARM_US_EARLIER} µs of ext_authz CPU per check on "
                         "this VM at its normal speed; this run's grpc.auth_direct is the same check. Multiplying by the factor "
                         "estimates the numbers at that speed (a rough estimate: gRPC's kernel-heavy cost may scale differently)"}
        for key, block in (("five_new", five_new), ("five_old", five_old), ("five_new_workers2", five_w2)):
            if block is not None:
                block["python_total_us_per_request_at_readme_speed_estimate"] = round(block["python_total_us_per_request"] * scale["factor"], 1)
        if "five_new_python_us_per_decision" in aims:
            aims["five_new_python_us_per_decision"]["value_at_readme_speed_estimate"] = five_new["python_total_us_per_request_at_readme_speed_estimate"]  # type: ignore[index]
    out: dict[str, Any] = {"method": "over rounds: requests/s the highest, percentiles the lowest, CPU per request the median; "
                                     "ratio_to_direct = that rps / the same stack's highest /direct rps",
                           "baselines_direct_rps": baselines, "aims": aims, "five": comparison, "envoy_steps": envoy_steps,
                           "speed_scaling": scale, "table": table}
    if profile is not None:
        out["profile_5_new"] = profile
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_wrk_arguments(parser, duration=10, threads=1)
    parser.add_argument("--rounds", type=int, default=1, help="runs of every scenario, the stack kept up (even rounds in reverse order)")
    parser.add_argument("--quiet-cores", type=float, default=0.3,
                        help="before each scenario wait until the machine's busy CPU (our processes idle) is at most this (0: do not wait)")
    parser.add_argument("--quiet-wait", type=float, default=30.0, help="the longest such wait, seconds (default: %(default)s)")
    parser.add_argument("--stacks", default=",".join(STACKS), help="which stacks, in this order (default: all)")
    parser.add_argument("--scenarios", default="", help="only these scenarios, as stack.name (default: all of the chosen stacks)")
    parser.add_argument("--cold-tokens", type=int, default=60_000, help="pre-generated RS256 tokens for scenario 6 (default: %(default)s)")
    parser.add_argument("--sign-processes", type=int, default=2, help="processes signing the cold tokens (default: %(default)s)")
    parser.add_argument("--max-batch", type=int, default=100, help="hybrid maxBatch of ext_authz and ratelimit_svc (default: %(default)s)")
    parser.add_argument("--redis-timeout", default="50ms", help="ext_authz http.rateLimit.redis.timeout (ratelimit_svc's harness uses 50ms)")
    parser.add_argument("--profile", choices=("auto", "always", "never"), default="auto",
                        help="py-spy on the ext_authz worker during an extra run of http.auth_limited: auto = when an aim is missed")
    parser.add_argument("--profile-rate", type=int, default=100, help="py-spy samples per second (default: %(default)s)")
    parser.add_argument("--profile-duration", type=int, default=20, help="seconds of the profiled run (default: %(default)s)")
    parser.add_argument("--handler-checks", type=int, default=5000, help="calls per case of the in-process HttpCheck timing (0: skip)")
    add_workdir_arguments(parser)
    args = parser.parse_args(argv)
    chosen(parser, args.stacks, STACKS, "stacks")
    chosen(parser, args.scenarios, sorted({s.key for s in SCENARIOS}))
    check_wrk_arguments(parser, args)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    require_wrk()
    stacks = [s for s in args.stacks.split(",") if s]
    only = {s for s in args.scenarios.split(",") if s}
    wanted = {stack: [s for s in SCENARIOS if s.stack == stack and (not only or s.key in only or s.name == "direct")] for stack in stacks}
    results: dict[str, list[dict[str, Any]]] = {}
    profile: dict[str, Any] | None = None
    with Run("gateway", argv, args, progress) as run:
        report = run.report
        report["settings"] = {
            **wrk_settings(args), "rounds": args.rounds, "quiet_cores": args.quiet_cores, "quiet_wait_s": args.quiet_wait,
            "envoy_concurrency": ENVOY_CONCURRENCY, "cold_tokens": args.cold_tokens, "hybrid_max_batch": args.max_batch,
            "ext_authz_redis_timeout": args.redis_timeout, "limit": limit_doc(),
            "stacks": {s: STACK_NOTES[s] for s in stacks},
            "one_stack_per_protocol": "extAuthz.protocol is control-plane-wide: each stack is its own control plane + Envoy (1 worker), "
                                      "started and measured one after the other in this run; ratios are against the same Envoy's /direct",
            "upstreams": {"fast": "a static Envoy (--concurrency 1) answering 200 itself, shared by all stacks (used by /public/fast, /auth/fast, "
                                  "/auth/limited and scenario 8)",
                          "echo": "tests/harness EchoUpstream (examples/upstream/echo.py, Python/aiohttp), one per stack (/public/echo)"},
            "cpu": "utime+stime (+cutime+cstime) of each process and all its live descendants, /proc/<pid>/stat, over the wrk run",
        }
        report["machine"] = describe(("grpcio", "protobuf", "PyJWT", "cryptography", "uvloop", "httptools", "redis", "structlog", "prometheus-client"),
                                     ("ext_authz", "gatehouse", "control_plane", "limiter", "ratelimit_svc", "servicekit"))
        speed_start = cpu_speed_probe()
        bench = GatewayBench(args, run)
        if any(s.token == "cold" for ss in wanted.values() for s in ss):
            progress(f"signing {args.cold_tokens} RS256 tokens per round ({args.rounds}) in {args.sign_processes} processes")
            report["cold_tokens"] = []
            for round_index in range(args.rounds):
                path = run.workdir / f"tokens-rs256-round{round_index + 1}.txt"
                bench.cold_files.append(path)
                report["cold_tokens"].append(write_tokens_in_parallel(path, bench.issuer, args.cold_tokens, 4 * 3600, args.sign_processes,
                                                                      first=round_index * args.cold_tokens))
        progress("starting Redis and the fast upstream")
        report["shared"] = bench.start_shared()
        report["stacks"] = {}
        for name in stacks:
            progress(f"stack {name}: starting ({STACK_NOTES[name]})")
            stack = bench.start_stack(name)
            report["stacks"][name] = {**stack.info, "pids": stack.processes, "listener_port": stack.listener_port}
            try:
                for round_index in range(args.rounds):
                    bench.round = round_index
                    for scenario in round_order(wanted[name], round_index):
                        quiet = wait_quiet(args.quiet_cores, args.quiet_wait)
                        result = bench.run(stack, scenario)
                        result["round"] = round_index + 1
                        result["quiet_wait"] = quiet
                        results.setdefault(scenario.key, []).append(result)
                if name == "http" and "http.auth_limited" in results and args.profile != "never":
                    profile = profile_five_new(bench, stack, results, args) or profile
            finally:
                progress(f"stack {name}: stopping")
                stack.stop()
        if args.handler_checks > 0 and "http" in stacks:
            progress(f"HttpCheck in-process, {args.handler_checks} calls per case")
            report["handler_in_process"] = handler_cost(run.workdir / "http" / "authz" / "ext-authz.yaml", bench.headers["warm"] or "",
                                                        args.handler_checks, run.workdir / "handler-in-process.log")
            for case, numbers in report["handler_in_process"].items():
                progress(f"  {case:<28} awaited {numbers['awaited_cpu_us']} us  as a task {numbers['as_task_cpu_us']} us CPU")
    summary = summarise(results, profile)
    report["machine"]["speed_probe_ns_per_iteration"] = {"at_start": speed_start, "at_end": cpu_speed_probe()}
    run.print(
        baseline={"direct_rps_by_stack": summary["baselines_direct_rps"],
                  "note": "each stack's own Envoy direct response (/direct), measured in the same run"},
        ratios={row["scenario"]: {"to_direct": row["ratio_to_direct"], "to_public_fast": row["ratio_to_public_fast"],
                                  "to_direct_per_round": row["ratio_to_direct_per_round"]}
                for row in summary["table"] if not row["scenario"].endswith(".direct")},
        summary=summary, scenarios=[result for runs in results.values() for result in runs],
    )
    return 0


def profile_five_new(bench: GatewayBench, stack: Stack, results: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> dict[str, Any] | None:
    """py-spy on the ext_authz worker during an extra, unmeasured run of http.auth_limited,
    when an aim is missed (``--profile auto``) or always; its shares × the measured µs."""
    partial = summarise(results, None)["aims"]
    if args.profile != "always" and partial.get("aims_met", False):
        return None
    progress("profiling ext_authz (py-spy --native) during an extra, unmeasured run of http.auth_limited")
    scenario = next(s for s in SCENARIOS if s.key == "http.auth_limited")
    wait_quiet(args.quiet_cores, args.quiet_wait)
    profiled = bench.run(stack, scenario, profile_to=bench.workdir / "profile-http-auth_limited.txt")
    profile = {"note": "py-spy record --native on the ext_authz process during an extra run of 5-new; "
                       "sampling slows the service: no rate from this run is used",
               "rps_while_profiled": profiled["rps"],
               "ext_authz_us_per_request_while_profiled": profiled["cpu"]["ext_authz"]["us_per_request"],
               **profiled["profile"]}
    measured = statistics.median(r["cpu"]["ext_authz"]["us_per_request"] for r in results["http.auth_limited"])
    profile["us_per_request_by_category"] = {
        "note": "share of running samples × the unprofiled 5-new ext_authz µs per request (median over rounds)",
        "ext_authz_us_per_request": round(measured, 1),
        **{c["name"]: round(c["share"] * measured, 1) for c in profile.get("categories", [])}}
    inside = profile.get("inside_HttpCheck", {}).get("share")
    if inside is not None:
        profile["us_per_request_by_category"]["inside HttpCheck (the handler)"] = round(inside * measured, 1)
        profile["us_per_request_by_category"]["outside HttpCheck (server, parser, task, loop, syscalls)"] = round((1 - inside) * measured, 1)
    return profile


if __name__ == "__main__":
    sys.exit(main())
