"""ext_authz throughput through real Envoy: warm token cache, cold path, denials, beside
Envoy with no ext_authz call, all measured in the same run with ``wrk``.

One stack: Redis (the revocation mirror's source), ``python -m gatehouse ext-authz`` with
an RS256 and an ES256 issuer (static JWKS files), the control plane, Envoy
(``--concurrency 1``, the harness's setting) and one echo upstream (Python/aiohttp).
Four routes:

    /open/echo     auth.required: false, proxied to the echo upstream   (baseline, no ext_authz call)
    /open/direct   auth.required: false, disabled: {status: 200}        (Envoy's ceiling)
    /auth/echo     auth.scopes: [bench:read], proxied                   (ext_authz + upstream)
    /auth/direct   auth.scopes: [bench:read], disabled: {status: 200}   (ext_authz only)

Each scenario is one ``wrk --latency`` run of ``--duration``. Warm scenarios repeat one valid
token (a verified-token cache hit); cold scenarios send a new pre-generated token on every
request (Lua ``request()``; each wrk thread takes its own slice, and stops when the slice is
used up, so no token is sent twice); deny scenarios send an invalid token (401). For each:
requests/s, latency percentiles, the ext_authz decisions made (``gatehouse_authz_decisions_total``
deltas, by result and reason), and CPU per check of the ext_authz process (utime+stime from
/proc/<pid>/stat, all threads: Python and grpc's C threads), plus Envoy's, the upstream's and
wrk's CPU per request, and the ext_authz process's context switches per check.

Two more measurements answer "grpc.aio or our handler?":
- ``trivial_grpc_direct``: a second gateway whose ext_authz is a trivial grpc.aio servicer
  (same server options, returns a constant OK): bare grpcio's CPU per check, same route;
- ``handler_in_process``: the servicer's ``Check`` called directly in this process (same
  config, keys, verifier, revocation mirror on the same Redis, audit sink to a file), plus
  CheckRequest parsing and CheckResponse serialization: our own µs per check, no gRPC.
``cpu_per_check_decomposition`` puts the three side by side. ``--profile-dir`` adds
``py-spy record --native`` of the ext_authz process during each scenario that calls it.

    .venv/bin/python -m bench.authz                          # all scenarios, 10 s each
    .venv/bin/python -m bench.authz --duration 20 --connections 64 --threads 2
    .venv/bin/python -m bench.authz --scenarios warm_direct,cold_rs256_direct --profile-dir /tmp/prof
    .venv/bin/python -m bench.authz --tracing --scenarios open_direct,warm_direct   # tracing off vs on, same run

One JSON document goes to stdout; progress to stderr. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.kit import profiler
from bench.kit.in_process import authz_parts
from bench.kit.machine import describe
from bench.kit.metrics import authz_decisions, delta
from bench.kit.processes import CpuWindow, context_switches, cpu_times, machine_costs, request_costs
from bench.kit.run import Bench, Progress, Run, Scenario, add_workdir_arguments, chosen
from bench.kit.stats import ratio
from bench.kit.tokens import AUDIENCE, SCOPE, Es256Issuer, bad_signature, claims, write_tokens
from bench.kit.wrk import add_wrk_arguments, check_wrk_arguments, require_wrk, run_wrk, write_lua, wrk_command, wrk_settings
from tests.harness.ext_authz import ExtAuthzProcess
from tests.harness.gateway import GatewayStack
from tests.harness.issuer import TestIssuer
from tests.harness.otlp_receiver import OtlpReceiver
from tests.harness.processes import ManagedProcess
from tests.harness.redis import RedisServer
from tests.harness.route_repo import route_doc

ENVOY_CONCURRENCY = 1
"""tests/harness/envoy.py starts Envoy with --concurrency 1: one worker thread."""

progress = Progress("authz")


def envoy_authz_stats(stack: GatewayStack) -> dict[str, int]:
    """Envoy's ext_authz filter counters (ok, denied, error, ...), by short name."""
    assert stack.envoy is not None
    stats = stack.envoy.stats("ext_authz")
    return {name.rsplit("ext_authz.", 1)[1]: value for name, value in stats.items() if ".ext_authz." in name and "cluster." not in name}


def decisions(authz: ExtAuthzProcess) -> Counter[str]:
    """``result/reason`` → count, from gatehouse_authz_decisions_total."""
    return authz_decisions(authz.metrics_text())


# -- scenarios --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class AuthzScenario(Scenario):
    token: str = "none"
    """none | warm (one valid token) | cold_rs256 | cold_es256 | bad_signature | malformed"""
    calls_authz: bool = True
    trivial: bool = False
    """Run against the second stack, whose ext_authz is a trivial grpc.aio servicer (returns OK)."""
    traced: bool = False
    """Run against the traced stack (``--tracing``): Envoy and ext_authz report spans to an OTLP receiver."""


SCENARIOS = [
    AuthzScenario("open_direct", "/open/direct", "Envoy direct response, ext_authz disabled on the route: Envoy's ceiling", calls_authz=False),
    AuthzScenario("open_echo", "/open/echo", "proxied to the echo upstream, ext_authz disabled on the route: baseline A", calls_authz=False),
    AuthzScenario("warm_direct", "/auth/direct", "one valid RS256 token repeated (cache hit), direct response", token="warm"),
    AuthzScenario("warm_echo", "/auth/echo", "one valid RS256 token repeated (cache hit), proxied to the echo upstream", token="warm"),
    AuthzScenario("cold_rs256_direct", "/auth/direct", "a new RS256 token per request (full verification), direct response", token="cold_rs256"),
    AuthzScenario("cold_es256_direct", "/auth/direct", "a new ES256 token per request (full verification), direct response", token="cold_es256"),
    AuthzScenario("deny_bad_signature", "/auth/direct", "one RS256 token with a broken signature repeated: 401 (failures are not cached: RSA every time)",
                  401, token="bad_signature"),
    AuthzScenario("deny_malformed", "/auth/direct", "'Bearer not-a-jwt' repeated: 401 at the cheapest check", 401, token="malformed"),
    AuthzScenario("trivial_grpc_direct", "/auth/direct", "the same route and token, but Envoy's ext_authz is a trivial grpc.aio servicer "
                  "that returns OK: bare grpcio's cost", token="warm", trivial=True),
]
TRACED = [
    AuthzScenario("warm_direct_traced", "/auth/direct", "warm_direct with tracing on (--tracing): Envoy samples 100 % and ext_authz reports "
                  "a span per check to an OTLP receiver", token="warm", traced=True),
]
BY_NAME = {s.name: s for s in (*SCENARIOS, *TRACED)}


# Where a sample's time goes: the innermost frame that names a category wins.
CATEGORIES: list[tuple[str, tuple[str, ...]]] = [
    ("gc", ("gc_collect",)),
    ("jwt_crypto", ("jwt/", "cryptography/", "libcrypto", "_rust.abi3", "_openssl", "libssl")),
    ("protobuf", ("google/protobuf", "_message.", "upb", "envoy/service/")),
    ("metrics", ("prometheus_client/",)),
    ("logging_audit", ("structlog/", "servicekit/audit.py", "logging/")),
    ("handler", ("ext_authz/",)),
    ("grpc", ("grpc/", "cygrpc", "libgrpc")),
    ("asyncio", ("asyncio/", "_asynciomodule", "selectors.py", "selectmodule")),
]
NAMED = {"gc", "jwt_crypto", "protobuf", "metrics", "logging_audit", "handler"}
"""Categories whose functions have useful names (grpc's Cython frames are bare addresses)."""


def summarise_profile(path: Path) -> dict[str, Any]:
    """bench.kit.profiler.summarise_profile with ext_authz's categories, ``inside_Check`` and ``inclusive_named``."""
    return profiler.summarise_profile(path, CATEGORIES, ("inside_Check", "AuthorizationService.Check ("), named=NAMED)


# -- the handler alone, in this process -------------------------------------------------


def check_request(authorization: str | None, path: str = "/auth/direct") -> bytes:
    """A serialized CheckRequest shaped like Envoy's (only the forwarded headers, the route's extensions)."""
    from envoy.service.auth.v3 import external_auth_pb2

    request = external_auth_pb2.CheckRequest()
    http = request.attributes.request.http
    http.method, http.path, http.host, http.protocol, http.scheme = "GET", path, "127.0.0.1", "HTTP/1.1", "http"
    http.id = "1234567890"
    http.headers["x-request-id"] = str(uuid.uuid4())
    if authorization is not None:
        http.headers["authorization"] = authorization
    request.attributes.context_extensions.update({"route": "default/auth-direct", "scopes": SCOPE})
    request.attributes.source.address.socket_address.address = "127.0.0.1"
    request.attributes.destination.address.socket_address.address = "127.0.0.1"
    return bytes(request.SerializeToString())


async def _handler_cost(config_path: Path, cases: dict[str, list[bytes]], log_path: Path) -> dict[str, Any]:
    """µs per check of the Authorization servicer's Check, called directly (no gRPC, no
    event-loop round trips), with the ext_authz process's own config: keys, verifier,
    revocation mirror (on the same Redis), audit log sink (to a file, as in the service)."""
    from envoy.service.auth.v3 import external_auth_pb2

    from ext_authz.service import AuthorizationService
    from servicekit.audit import LogAuditSink

    async with authz_parts(config_path, log_path) as parts:
        service = AuthorizationService(parts.authorizer, LogAuditSink())
        parse = external_auth_pb2.CheckRequest.FromString
        results: dict[str, Any] = {}
        for name, blobs in cases.items():
            requests = [parse(b) for b in blobs]
            started = time.perf_counter()
            for blob in blobs:
                parse(blob)
            parse_s = time.perf_counter() - started
            responses = []
            started = time.perf_counter()
            for request in requests:
                responses.append(await service.Check(request, None))
            check_s = time.perf_counter() - started
            started = time.perf_counter()
            for response in responses:
                response.SerializeToString()
            serialize_s = time.perf_counter() - started
            n = len(blobs)
            statuses = Counter(r.denied_response.status.code if r.HasField("denied_response") else 200 for r in responses)
            results[name] = {
                "n": n,
                "check_us": round(check_s * 1e6 / n, 1),
                "parse_request_us": round(parse_s * 1e6 / n, 2),
                "serialize_response_us": round(serialize_s * 1e6 / n, 2),
                "total_us": round((parse_s + check_s + serialize_s) * 1e6 / n, 1),
                "statuses": {str(k): v for k, v in statuses.items()},
            }
        return results


# -- the run ----------------------------------------------------------------------------


def routes() -> list[dict[str, Any]]:
    backend = [{"service": "svc-a", "port": 8080}]
    ok = {"status": 200, "body": "ok"}
    required = {"scopes": [SCOPE]}
    return [
        route_doc("open-echo", {"match": {"pathPrefix": "/open/echo"}, "backends": backend, "auth": {"required": False}}),
        route_doc("open-direct", {"match": {"pathPrefix": "/open/direct"}, "disabled": ok, "auth": {"required": False}}),
        route_doc("auth-echo", {"match": {"pathPrefix": "/auth/echo"}, "backends": backend, "auth": required}),
        route_doc("auth-direct", {"match": {"pathPrefix": "/auth/direct"}, "disabled": ok, "auth": required}),
    ]


class AuthzBench(Bench):
    def __init__(self, args: argparse.Namespace, run: Run) -> None:
        super().__init__(args, run)
        workdir = self.workdir
        self.redis: RedisServer | None = None
        self.authz: ExtAuthzProcess | None = None
        self.stack: GatewayStack | None = None
        self.trivial: ManagedProcess | None = None
        self.trivial_stack: GatewayStack | None = None
        self.receiver: OtlpReceiver | None = None
        self.traced_authz: ExtAuthzProcess | None = None
        self.traced_stack: GatewayStack | None = None
        self.rs256 = TestIssuer(audience=AUDIENCE)
        self.es256 = Es256Issuer()
        self.static_lua, self.tokens_lua = write_lua(workdir)
        self.token_files: dict[str, Path] = {}
        self.headers: dict[str, str | None] = {}

    # setup / teardown

    def prepare_tokens(self, wanted: list[AuthzScenario]) -> dict[str, Any]:
        info: dict[str, Any] = {}
        ttl = 4 * 3600
        kinds = {s.token for s in wanted}
        if "cold_rs256" in kinds:
            progress(f"signing {self.args.cold_tokens} RS256 tokens")
            path = self.workdir / "tokens-rs256.txt"
            info["cold_rs256"] = write_tokens(path, self.rs256, self.args.cold_tokens, ttl)
            self.token_files["cold_rs256"] = path
        if "cold_es256" in kinds:
            progress(f"signing {self.args.cold_tokens} ES256 tokens")
            path = self.workdir / "tokens-es256.txt"
            info["cold_es256"] = write_tokens(path, self.es256, self.args.cold_tokens, ttl)
            self.token_files["cold_es256"] = path
        warm = self.rs256.token("warm-user", ttl=ttl, **claims())
        self.headers = {
            "none": None,
            "warm": f"Bearer {warm}",
            "bad_signature": f"Bearer {bad_signature(self.rs256.token('mallory', ttl=ttl, **claims()))}",
            "malformed": "Bearer not-a-jwt",
        }
        return info

    def _gateway(self, name: str, authz_address: str, tracing: dict[str, Any] | None = None) -> GatewayStack:
        extra: dict[str, Any] = {"extAuthz": {"address": [authz_address], "protocol": "grpc"}}
        if tracing is not None:
            extra["tracing"] = tracing
        if self.args.authz_timeout:
            extra["extAuthz"]["timeout"] = self.args.authz_timeout
        stack = self.gateway(name, routes(), wait_path="/open/direct", extra=extra)
        for path in ("/open/echo", "/auth/echo", "/auth/direct"):
            stack.wait_status(path, 401 if path.startswith("/auth") and name != "trivial-stack" else 200)
        return stack

    def authz_config(self) -> dict[str, Any]:
        issuers = [
            {"issuer": self.rs256.issuer, "audiences": [AUDIENCE], "requireJti": True,
             "jwksFile": str(self.rs256.write_jwks(self.workdir / "jwks-rs256.json"))},
            {"issuer": self.es256.issuer, "audiences": [AUDIENCE], "requireJti": True,
             "jwksFile": str(self.es256.write_jwks(self.workdir / "jwks-es256.json"))},
        ]
        config: dict[str, Any] = {"issuers": issuers}
        if self.redis is not None:
            config["revocation"] = {"redisUrl": self.redis.url}
        return config

    def start(self) -> dict[str, Any]:
        started = time.monotonic()
        if not self.args.no_redis:
            self.redis = self.parts.add(RedisServer.start(log_dir=self.workdir / "redis"))
        self.authz = self.parts.add(ExtAuthzProcess(self.workdir / "authz", self.authz_config())).start()
        self.stack = self._gateway("stack", self.authz.address)
        return {"start_s": round(time.monotonic() - started, 2)}

    def start_trivial(self) -> None:
        """A second gateway whose ext_authz is bench.standins.trivial's (started on first use)."""
        if self.trivial_stack is not None:
            return
        self.trivial, port = self.start_standin("trivial", "authz", log_name="trivial-authz")
        self.trivial_stack = self._gateway("trivial-stack", f"127.0.0.1:{port}")

    def start_traced(self) -> None:
        """A third gateway with tracing on, its own ext_authz reporting spans, and an OTLP
        receiver in this process (started on first use)."""
        if self.traced_stack is not None:
            return
        self.receiver = self.parts.add(OtlpReceiver()).start()
        config = {**self.authz_config(), "tracing": {"otlpAddress": self.receiver.address, "serviceName": "bench-ext-authz"}}
        self.traced_authz = self.parts.add(ExtAuthzProcess(self.workdir / "traced-authz", config, name="traced-authz")).start()
        tracing = {"otlpAddress": self.receiver.address, "samplingPercent": 100, "serviceName": "bench-gateway"}
        self.traced_stack = self._gateway("traced-stack", self.traced_authz.address, tracing)

    def preflight(self, scenario: AuthzScenario) -> None:
        """One request with this scenario's kind of token, before the load: right status?"""
        stack = self._stack(scenario)
        assert stack is not None
        if scenario.token.startswith("cold_"):
            issuer = self.rs256 if scenario.token == "cold_rs256" else self.es256
            header: str | None = f"Bearer {issuer.token('preflight', **claims())}"  # not in the token file
        else:
            header = self.headers[scenario.token]
        reply = stack.get(scenario.path, headers={"authorization": header} if header else {})
        if reply.status != scenario.expect_status:
            raise RuntimeError(f"{scenario.name}: {scenario.path} answered {reply.status}, expected {scenario.expect_status}: {reply.body[:300]!r}")

    # one wrk run

    def wrk(self, scenario: AuthzScenario, duration: int, log_name: str) -> dict[str, Any]:
        stack = self._stack(scenario)
        assert stack is not None
        url = f"http://127.0.0.1:{stack.listener_port}{scenario.path}"
        load = {"threads": self.args.threads, "connections": self.args.connections, "duration": duration}
        if scenario.token.startswith("cold_"):
            argv = wrk_command(url, **load, script=self.tokens_lua, script_args=(str(self.token_files[scenario.token]), str(self.args.threads)))
        else:
            header = self.headers[scenario.token]
            argv = wrk_command(url, **load, script=self.static_lua, headers=(f"Authorization: {header}",) if header else ())
        return run_wrk(argv, duration, self.workdir, log_name)

    def _stack(self, scenario: AuthzScenario) -> GatewayStack | None:
        if scenario.traced:
            return self.traced_stack
        return self.trivial_stack if scenario.trivial else self.stack

    def run(self, scenario: AuthzScenario, *, profile: bool) -> dict[str, Any]:
        if scenario.trivial:
            progress("starting the second gateway (trivial grpc.aio ext_authz)")
            self.start_trivial()
        if scenario.traced:
            progress("starting the traced gateway (tracing on, ext_authz spans, OTLP receiver)")
            self.start_traced()
        stack = self._stack(scenario)
        authz = self.traced_authz if scenario.traced else self.authz
        service = self.trivial if scenario.trivial else (authz.process if authz else None)
        spans_before = len(self.receiver.snapshot()) if self.receiver is not None else 0
        assert stack is not None and stack.envoy is not None and service is not None and authz is not None
        self.preflight(scenario)
        authz_pid = service.pid
        envoy_pid = stack.envoy.pid
        upstream_pid = stack.upstreams["svc-a"].pid
        sampler = None
        if profile:
            sampler = profiler.Profiler(authz_pid, Path(self.args.profile_dir) / f"authz-{scenario.name}.txt", self.args.profile_rate,
                                        summarise_profile)
        before = decisions(authz)
        envoy_before = envoy_authz_stats(stack)
        switches_before = context_switches(authz_pid)
        authz_system_before = cpu_times(authz_pid)[1]
        window = CpuWindow({"authz": authz_pid, "envoy": envoy_pid, "upstream": upstream_pid})
        load = self.wrk(scenario, self.args.duration, scenario.name)
        cpu = window.used()
        switches = context_switches(authz_pid) - switches_before
        authz_system = cpu_times(authz_pid)[1] - authz_system_before
        made = decisions(authz) - before
        envoy_after = envoy_authz_stats(stack)
        result: dict[str, Any] = {"name": scenario.name, "path": scenario.path, "description": scenario.description,
                                  "expect_status": scenario.expect_status, **load}
        requests = load["requests"]
        if scenario.trivial:
            checks = requests  # the trivial servicer counts nothing; every request on this route is one check
            result["checks_counted_by"] = "wrk requests (trivial servicer has no counter)"
            if made:
                result["warning"] = "Gatehouse's ext_authz made decisions during the trivial run"
        else:
            checks = sum(made.values())
            result["checks_counted_by"] = "gatehouse_authz_decisions_total delta"
            result["decisions"] = dict(sorted(made.items()))
        result["status_as_expected"] = scenario.status_as_expected(load)
        result["checks"] = checks
        result["envoy_ext_authz"] = delta(envoy_before, envoy_after)
        result["checks_per_s"] = round(checks / load["duration_s"], 1) if checks else None
        result["cpu"] = {
            "ext_authz_us_per_check": round(cpu["authz"] * 1e6 / checks, 1) if checks else None,
            "ext_authz_cores": round(cpu["authz"] / cpu["wall"], 3),
            "ext_authz_kernel_share": round(authz_system / cpu["authz"], 3) if cpu["authz"] else None,
            "ext_authz_context_switches_per_check": round(switches / checks, 2) if checks else None,
            **request_costs(cpu, ("envoy", "upstream", "wrk"), requests),
            **machine_costs(cpu, ("authz", "envoy", "upstream", "wrk"), window.load_average),
        }
        if scenario.token.startswith("cold_"):
            tokens = self.args.cold_tokens
            exhausted = requests >= tokens - self.args.connections
            result["cold"] = {"tokens": tokens, "exhausted": exhausted,
                              "note": "each wrk thread stops when its slice is used up; no token is sent twice"}
            if exhausted:
                result["warning"] = "the token list ran out before --duration: rps is understated; raise --cold-tokens"
        if scenario.traced and self.receiver is not None:
            time.sleep(6)  # Envoy exports every 5 s, ext_authz every 1 s
            spans = self.receiver.snapshot()[spans_before:]
            result["spans_received"] = dict(sorted(Counter(s.service for s in spans).items()))
            result["ext_authz_spans_dropped"] = {r: authz.metric("gatehouse_tracing_spans_dropped_total", reason=r)
                                                 for r in ("queue_full", "export_failed")}
        if sampler is not None:
            result["profiled"] = True
            result["profile"] = sampler.stop()
        if not scenario.calls_authz and checks:
            result["warning"] = "ext_authz made decisions on a route where it is disabled"
        progress(
            f"  {scenario.name:<20} {load['rps']:>9.1f} req/s  p50 {load['latency_ms']['p50']:.2f} ms  p99 {load['latency_ms']['p99']:.2f} ms  "
            f"checks {checks}  ext_authz {result['cpu']['ext_authz_us_per_check']} us/check ({result['cpu']['ext_authz_cores']} cores)  "
            f"status errors {load['status_errors']}{'' if result['status_as_expected'] else ' (UNEXPECTED)'}"
        )
        return result

    def warm_up(self) -> None:
        for name in ("open_direct", "warm_direct"):
            scenario = BY_NAME[name]
            self.preflight(scenario)
            self.wrk(scenario, self.args.warmup, f"warmup-{name}")

    def handler_cost(self, n: int) -> dict[str, Any]:
        """The servicer's Check called directly in this process (see _handler_cost)."""
        assert self.authz is not None
        cases: dict[str, list[bytes]] = {
            "warm": [check_request(self.headers["warm"])] * n,
            "bad_signature": [check_request(self.headers["bad_signature"])] * n,
            "malformed": [check_request(self.headers["malformed"])] * n,
        }
        for kind, path in self.token_files.items():
            with open(path) as tokens:
                lines = [line.strip() for line in tokens if line.strip()]
            cases[kind] = [check_request(f"Bearer {t}") for t in lines[-n:]]
        return asyncio.run(_handler_cost(self.authz.config_path, cases, self.workdir / "handler-cost.log"))


HANDLER_CASE = {"warm_direct": "warm", "warm_echo": "warm", "cold_rs256_direct": "cold_rs256", "cold_es256_direct": "cold_es256",
                "deny_bad_signature": "bad_signature", "deny_malformed": "malformed"}


def decomposition(results: dict[str, dict[str, Any]], handler: dict[str, Any]) -> list[dict[str, Any]]:
    """Per check: the ext_authz process's CPU through Envoy = the servicer's own work (measured
    in-process: Check + protobuf parse/serialize) + everything else (grpc.aio, the event loop,
    syscalls, the poller thread). The trivial servicer's CPU per check is bare grpcio's."""
    trivial = results.get("trivial_grpc_direct", {}).get("cpu", {}).get("ext_authz_us_per_check")
    rows = []
    for name, case in HANDLER_CASE.items():
        if name not in results or case not in handler:
            continue
        total = results[name]["cpu"]["ext_authz_us_per_check"]
        own = handler[case]["total_us"]
        rows.append({
            "scenario": name,
            "ext_authz_cpu_us_per_check": total,
            "servicer_in_process_us": own,
            "of_which_Check_us": handler[case]["check_us"],
            "rest_grpc_asyncio_us": round(total - own, 1) if total is not None else None,
            "trivial_grpc_servicer_us": trivial,
            "added_over_trivial_us": round(total - trivial, 1) if total is not None and trivial is not None else None,
        })
    return rows


RPS_RATIOS = (
    ("open_echo", "open_direct"),
    ("warm_direct", "open_direct"),
    ("warm_echo", "open_echo"),
    ("cold_rs256_direct", "open_direct"),
    ("cold_es256_direct", "open_direct"),
    ("deny_bad_signature", "open_direct"),
    ("deny_malformed", "open_direct"),
    ("trivial_grpc_direct", "open_direct"),
    ("warm_direct", "trivial_grpc_direct"),
    ("warm_direct_traced", "warm_direct"),
)
"""Requests/s ratios of the same run, reported as ``<a>_over_<b>``."""


def summarise(results: dict[str, dict[str, Any]], handler: dict[str, Any]) -> dict[str, Any]:
    def rps(name: str) -> float | None:
        return results[name]["rps"] if name in results else None

    def p50(name: str) -> float | None:
        return results[name]["latency_ms"]["p50"] if name in results else None

    baseline = {
        "envoy_ceiling_rps": rps("open_direct"),
        "proxied_no_authz_rps": rps("open_echo"),
        "envoy_ceiling_p50_ms": p50("open_direct"),
        "proxied_no_authz_p50_ms": p50("open_echo"),
    }
    ratios = {f"{a}_over_{b}": ratio(rps(a), rps(b)) for a, b in RPS_RATIOS}
    ratios["cold_rs256_over_warm_direct"] = ratio(rps("cold_rs256_direct"), rps("warm_direct"))
    ratios["cold_es256_over_warm_direct"] = ratio(rps("cold_es256_direct"), rps("warm_direct"))
    added = {
        f"{name}_p50_added_ms": round(p50(name) - p50(base), 3)  # type: ignore[operator]
        for name, base in (("warm_direct", "open_direct"), ("warm_echo", "open_echo"), ("cold_rs256_direct", "open_direct"),
                           ("cold_es256_direct", "open_direct"))
        if name in results and base in results
    }
    table = [
        {
            "scenario": r["name"],
            "rps": r["rps"],
            "p50_ms": r["latency_ms"]["p50"],
            "p99_ms": r["latency_ms"]["p99"],
            "checks_per_s": r["checks_per_s"],
            "ext_authz_us_per_check": r["cpu"]["ext_authz_us_per_check"],
            "ext_authz_cores": r["cpu"]["ext_authz_cores"],
            "envoy_us_per_request": r["cpu"]["envoy_us_per_request"],
            "other_processes_cores": r["cpu"]["other_processes_cores"],
            "status_as_expected": r["status_as_expected"],
        }
        for r in results.values()
    ]
    def cpu(name: str, key: str) -> float | None:
        return results[name]["cpu"][key] if name in results else None

    tracing = {
        f"{key}_traced_over_untraced": ratio(cpu("warm_direct_traced", key), cpu("warm_direct", key))
        for key in ("ext_authz_us_per_check", "envoy_us_per_request")
    }
    if "warm_direct_traced" in results and "warm_direct" in results:
        tracing["ext_authz_us_added_per_check"] = round(
            cpu("warm_direct_traced", "ext_authz_us_per_check") - cpu("warm_direct", "ext_authz_us_per_check"), 1)  # type: ignore[operator]
        tracing["envoy_us_added_per_request"] = round(
            cpu("warm_direct_traced", "envoy_us_per_request") - cpu("warm_direct", "envoy_us_per_request"), 1)  # type: ignore[operator]
    return {"baseline": baseline, "ratios": {k: v for k, v in ratios.items() if v is not None}, "latency_added": added,
            "tracing": {k: v for k, v in tracing.items() if v is not None},
            "table": table, "cpu_per_check_decomposition": decomposition(results, handler)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_wrk_arguments(parser, duration=10, threads=2, warmup_help="seconds of unmeasured load on open_direct and warm_direct first (0: none)")
    parser.add_argument("--scenarios", default=",".join(s.name for s in SCENARIOS), help="comma-separated, in this order (default: all)")
    parser.add_argument("--cold-tokens", type=int, default=50_000, help="pre-generated tokens per cold scenario (default: %(default)s)")
    parser.add_argument("--no-redis", action="store_true", help="run ext_authz without revocation (no Redis, no mirror)")
    parser.add_argument("--authz-timeout", help="the control plane's extAuthz.timeout (Envoy's check timeout; default 250ms)")
    parser.add_argument("--profile-dir", help="py-spy record --native on ext_authz during each scenario that calls it (perturbs the numbers)")
    parser.add_argument("--profile-rate", type=int, default=100, help="py-spy samples per second (default: %(default)s)")
    parser.add_argument("--handler-checks", type=int, default=2000, help="calls per case of the in-process Check measurement (0: skip)")
    parser.add_argument("--tracing", action="store_true",
                        help="also warm_direct_traced: a third gateway with tracing on and ext_authz reporting spans to an OTLP receiver "
                             "(the untraced warm_direct is the baseline of the same run)")
    add_workdir_arguments(parser)
    args = parser.parse_args(argv)
    chosen(parser, args.scenarios, BY_NAME)
    check_wrk_arguments(parser, args)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    require_wrk()
    wanted = [BY_NAME[n] for n in args.scenarios.split(",") if n]
    if args.tracing:
        if "warm_direct" not in [s.name for s in wanted]:
            wanted.append(BY_NAME["warm_direct"])
        wanted += [s for s in TRACED if s not in wanted]
    results: dict[str, dict[str, Any]] = {}
    with Run("authz", argv, args, progress) as run:
        report = run.report
        report["settings"] = {
            **wrk_settings(args),
            "envoy_concurrency": ENVOY_CONCURRENCY,
            "cold_tokens": args.cold_tokens,
            "revocation": "redis mirror (local, no Redis round trip per check)" if not args.no_redis else "off",
            "ext_authz_timeout": args.authz_timeout or "250ms (default)",
            "profiled": bool(args.profile_dir),
            "tracing": "warm_direct_traced: Envoy samplingPercent 100, ext_authz tracing: on, OTLP receiver in the bench process" if args.tracing else "off",
            "upstream": "examples/upstream/echo.py (Python/aiohttp), one process",
        }
        report["machine"] = describe(("grpcio", "protobuf", "PyJWT", "cryptography", "prometheus-client", "structlog"),
                                     ("ext_authz", "gatehouse", "control_plane"))
        bench = AuthzBench(args, run)
        report["tokens"] = bench.prepare_tokens(wanted)
        progress("starting Redis, ext_authz, control plane, Envoy, upstream")
        report["stack"] = bench.start()
        if args.warmup > 0:
            progress(f"warm-up: {args.warmup:g} s on open_direct and warm_direct")
            bench.warm_up()
        for scenario in wanted:
            results[scenario.name] = bench.run(scenario, profile=bool(args.profile_dir) and scenario.calls_authz)
        if args.handler_checks > 0:
            progress(f"the servicer's Check in-process, {args.handler_checks} calls per case")
            report["handler_in_process"] = bench.handler_cost(args.handler_checks)
            for name, case in report["handler_in_process"].items():
                progress(f"  {name:<14} Check {case['check_us']} us + parse {case['parse_request_us']} us + serialize {case['serialize_response_us']} us")
    summary = summarise(results, report.get("handler_in_process", {}))
    run.print(**summary, scenarios=list(results.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
