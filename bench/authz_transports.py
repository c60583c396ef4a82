"""Which Python server stack answers Envoy's ext_authz ``http_service`` for the least CPU?

One Envoy (``--concurrency 1``, static bootstrap, admin on a free port) with one listener per
scenario. Every listener has the same HTTP connection manager and the same route, a
``direct_response`` 200 that echoes the ``x-user-id`` request header back as ``x-seen-user-id``
(so a preflight proves the header the authorization server set reached the "upstream"). They
differ only in the ``envoy.filters.http.ext_authz`` filter in front of the router:

    baseline_direct            no ext_authz: Envoy alone (baseline A)
    http_asyncio_raw           stdlib asyncio.Protocol + a minimal hand parser (lower bound)
    http_uvloop_raw            uvloop + the same hand parser (lower bound)
    http_asyncio_httptools     stdlib asyncio.Protocol + httptools.HttpRequestParser
    http_uvloop_httptools      uvloop + httptools
    http_uvloop_h11            uvloop + h11 (parsing and response serialization by h11)
    http_aiohttp_lowlevel      aiohttp.web.Server (low-level, no router/app), stdlib loop: framework reference
    http_aiohttp_lowlevel_uvloop  the same on uvloop
    grpc_aio                   ext_authz over grpc_service: a trivial grpc.aio Authorization servicer
    proxy_uvloop_httptools     reference, no ext_authz: the route proxies to the uvloop+httptools server
                               instead (what one upstream HTTP/1.1 exchange costs Envoy's router)

Every authorization server is its own process (``python -m bench.standins.authz_servers
KIND --port P``), single-threaded except grpc.aio's own threads. Each one reads the check
request's method, path and ``authorization`` header and answers 200 with ``x-user-id: alice``
when the header starts with ``Bearer `` (401 otherwise); keep-alive unless the request says
``connection: close``. Envoy forwards ``authorization`` (``allowed_headers``) and passes
``x-user-id`` upstream (``authorization_response.allowed_upstream_headers``). HTTP authz
clusters are STATIC, plain HTTP/1.1, with ``--authz-connections`` as the circuit breaker's
max_connections (the pool size); the gRPC cluster is HTTP/2 (one connection).

Load: ``wrk -t1 -c32 -d<duration>s --latency -H 'Authorization: Bearer x'``. Scenarios are
interleaved over ``--rounds`` rounds (odd rounds in reverse order), each measurement preceded
by ``--warmup`` s of unmeasured load on the same listener and followed by ``--unloaded-duration``
s of ``wrk -c1`` (latency without queueing). Per run: requests/s, latency
percentiles, Envoy's ext_authz counters (every request must be one ``ok`` check), CPU of
Envoy, of the authorization server and of wrk (utime+stime from /proc/<pid>/stat, all
threads) per request, the server's context switches per request, the whole machine's busy
cores. ``summary`` gives medians over rounds, the spread, rps / baseline A, and medians over the
"quiet" runs only (other processes used at most ``--quiet-cores``): this machine is shared.

Before the load, a probe (``--no-probe`` skips it) records how Envoy's HTTP ext_authz behaves:
the raw check request it sends (method, path with path_prefix, forwarded headers,
content-length), connection reuse, what 200/204/302/401/403/500/timeouts/``connection: close``
from the authorization server become for the client, and which headers reach the upstream and
the client, with the top-level ``allowed_headers``, the deprecated
``authorization_request.allowed_headers`` and with neither.

    .venv/bin/python -m bench.authz_transports                           # all, 10 s, 2 rounds
    .venv/bin/python -m bench.authz_transports --duration 5 --rounds 3 --scenarios baseline_direct,http_uvloop_httptools,grpc_aio

One JSON document goes to stdout; progress to stderr.
"""

from __future__ import annotations

import argparse
import functools
import http.client
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.kit.envoy_config import address, router_filter
from bench.kit.machine import describe
from bench.kit.metrics import delta
from bench.kit.processes import CpuWindow, context_switches, cpu_times, machine_costs, request_costs
from bench.kit.run import Bench, Progress, Run, Scenario, add_workdir_arguments, chosen, round_order
from bench.kit.stats import median, spread_pct
from bench.kit.wrk import LUA_DONE, add_wrk_arguments, check_wrk_arguments, require_wrk, run_wrk, wrk_command
from bench.standins.authz_servers import PROBE_SLOW_S
from tests.harness.envoy import EnvoyProcess
from tests.harness.ports import free_port
from tests.harness.processes import ManagedProcess, port_open

CHECK_PREFIX = "/check"
"""http_service.path_prefix: the check request's path is this + the original path."""
PROBE_TIMEOUT_MS = 250
LOAD_PATH = "/api/thing"

progress = Progress("authz_transports")


# == the benchmark ======================================================================


@dataclass(frozen=True, kw_only=True)
class TransportScenario(Scenario):
    transport: str | None
    """None (Envoy alone), http or grpc (an ext_authz filter calls ``server``), proxy (``server`` is the upstream)."""
    server: str = ""
    """The bench.standins.authz_servers kind (none for Envoy alone)."""


def _scenario(name: str, transport: str | None, server: str, description: str) -> TransportScenario:
    return TransportScenario(name=name, path=LOAD_PATH, description=description, transport=transport, server=server)


SCENARIOS: dict[str, TransportScenario] = {s.name: s for s in (
    _scenario("baseline_direct", None, "", "Envoy's direct_response alone, no ext_authz (baseline A)"),
    _scenario("http_asyncio_raw", "http", "asyncio_raw", "stdlib asyncio.Protocol + minimal hand parser (lower bound)"),
    _scenario("http_uvloop_raw", "http", "uvloop_raw", "uvloop + minimal hand parser (lower bound)"),
    _scenario("http_asyncio_httptools", "http", "asyncio_httptools", "stdlib asyncio.Protocol + httptools"),
    _scenario("http_uvloop_httptools", "http", "uvloop_httptools", "uvloop + httptools (asyncio.Protocol)"),
    _scenario("http_uvloop_h11", "http", "uvloop_h11", "uvloop + h11 (asyncio.Protocol)"),
    _scenario("http_aiohttp_lowlevel", "http", "aiohttp_lowlevel", "aiohttp.web.Server (low-level), stdlib asyncio loop"),
    _scenario("http_aiohttp_lowlevel_uvloop", "http", "aiohttp_lowlevel_uvloop", "aiohttp.web.Server (low-level) on uvloop"),
    _scenario("grpc_aio", "grpc", "grpc_aio", "ext_authz grpc_service: trivial grpc.aio Authorization servicer"),
    _scenario("proxy_uvloop_httptools", "proxy", "uvloop_httptools",
              "reference, no ext_authz: Envoy proxies the request to the uvloop+httptools server as its upstream "
              "(what one upstream HTTP/1.1 exchange costs Envoy's router)"),
)}


def cluster(name: str, port: int, *, http2: bool, max_connections: int) -> dict[str, Any]:
    protocol: dict[str, Any] = {"http2_protocol_options": {}} if http2 else {"http_protocol_options": {}}
    return {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [{"endpoint": {"address": address(port)}}]}]},
        "circuit_breakers": {"thresholds": [{"max_connections": max_connections, "max_pending_requests": 4096, "max_requests": 4096}]},
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": protocol,
            }
        },
    }


def ext_authz_filter(transport: str, cluster_name: str, port: int, timeout: str, *, header_rules: str = "top_level",
                     path_prefix: str = CHECK_PREFIX) -> dict[str, Any]:
    """header_rules: top_level (ExtAuthz.allowed_headers), legacy (http_service.authorization_request.allowed_headers,
    deprecated), none (neither: Envoy's default set)."""
    authorization = {"patterns": [{"exact": "authorization"}]}
    config: dict[str, Any] = {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz",
        "transport_api_version": "V3",
        "failure_mode_allow": False,
    }
    if header_rules == "top_level":
        config["allowed_headers"] = authorization
    if transport == "grpc":
        config["grpc_service"] = {"envoy_grpc": {"cluster_name": cluster_name}, "timeout": timeout}
    else:
        service: dict[str, Any] = {
            "server_uri": {"uri": f"http://127.0.0.1:{port}", "cluster": cluster_name, "timeout": timeout},
            "path_prefix": path_prefix,
            "authorization_response": {"allowed_upstream_headers": {"patterns": [{"exact": "x-user-id"}]}},
        }
        if header_rules == "legacy":
            service["authorization_request"] = {"allowed_headers": authorization}
        config["http_service"] = service
    return {"name": "envoy.filters.http.ext_authz", "typed_config": config}


def listener(name: str, port: int, authz: dict[str, Any] | None, *, echo: tuple[str, ...] = ("x-user-id",),
             upstream: str | None = None) -> dict[str, Any]:
    filters = ([authz] if authz else []) + [router_filter()]
    echoed = [{"header": {"key": f"x-seen-{h.removeprefix('x-')}", "value": f"%REQ({h})%"}} for h in echo]
    route: dict[str, Any] = {"match": {"prefix": "/"}, "direct_response": {"status": 200, "body": {"inline_string": "ok"}}}
    if upstream is not None:
        route = {"match": {"prefix": "/"}, "route": {"cluster": upstream, "timeout": "5s"}}
    if echoed:
        route["response_headers_to_add"] = echoed
    hcm = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": name,
        "codec_type": "AUTO",
        "route_config": {"name": name, "virtual_hosts": [{"name": name, "domains": ["*"], "routes": [route]}]},
        "http_filters": filters,
    }
    return {
        "name": name,
        "address": address(port),
        "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}]}],
    }


PROBE_ECHO = ("x-user-id", "x-not-allowed", "x-client-visible", "authorization", "x-custom")
PROBE_VARIANTS = ("top_level", "legacy", "none")
PROBE_CASES = {
    "allow": "200, x-user-id: alice, x-not-allowed, x-client-visible, set-cookie",
    "allow-nouser": "200 without x-user-id (the client sent x-user-id: mallory)",
    "allow-body": "200, x-user-id: alice, a 7-byte body",
    "status204": "204, x-user-id: alice",
    "status302": "302, location, x-reason",
    "deny401": "401, www-authenticate, x-reason, content-type, body 'token expired'",
    "deny403": "403, x-reason, body 'forbidden'",
    "status500": "500, body 'boom'",
    "slow": f"200 after {int(PROBE_SLOW_S * 1000)} ms (the timeout is {PROBE_TIMEOUT_MS} ms)",
}


class TransportBench(Bench):
    def __init__(self, args: argparse.Namespace, run: Run) -> None:
        super().__init__(args, run)
        self.names = [n for n in args.scenarios.split(",") if n]
        self.servers: dict[str, ManagedProcess] = {}
        self.server_ports: dict[str, int] = {}
        self.listener_ports: dict[str, int] = {}
        self.envoy: Any = None
        self.lua = self.workdir / "report.lua"
        self.lua.write_text(LUA_DONE)
        self.probe_dump = self.workdir / "probe.jsonl"

    # -- processes -------------------------------------------------------------------

    def start(self) -> dict[str, Any]:
        kinds = [SCENARIOS[n].server for n in self.names if SCENARIOS[n].transport]
        if not self.args.no_probe:
            kinds.append("probe")
        started = time.monotonic()
        for kind in dict.fromkeys(kinds):
            dump = ("--dump", str(self.probe_dump)) if kind == "probe" else ()
            self.servers[kind], self.server_ports[kind] = self.start_standin("authz_servers", kind, *dump, log_name=f"authz-{kind}")

        listeners, clusters = [], []
        timeout = self.args.authz_timeout
        for name in self.names:
            spec = SCENARIOS[name]
            port = free_port()
            self.listener_ports[name] = port
            authz = None
            if spec.transport == "proxy":
                kind = spec.server
                clusters.append(cluster(f"upstream_{kind}", self.server_ports[kind], http2=False, max_connections=self.args.authz_connections))
                listeners.append(listener(name, port, None, echo=(), upstream=f"upstream_{kind}"))
                continue
            if spec.transport:
                kind = spec.server
                http2 = spec.transport == "grpc"
                clusters.append(cluster(f"authz_{kind}", self.server_ports[kind], http2=http2, max_connections=self.args.authz_connections))
                authz = ext_authz_filter(spec.transport, f"authz_{kind}", self.server_ports[kind], timeout)
            listeners.append(listener(name, port, authz))
        if not self.args.no_probe:
            probe_port = self.server_ports["probe"]
            clusters.append(cluster("authz_probe", probe_port, http2=False, max_connections=self.args.authz_connections))
            for variant in PROBE_VARIANTS:
                name = f"probe_{variant}"
                port = free_port()
                self.listener_ports[name] = port
                authz = ext_authz_filter("http", "authz_probe", probe_port, f"{PROBE_TIMEOUT_MS / 1000}s", header_rules=variant,
                                         path_prefix=f"/probe-{variant}")
                listeners.append(listener(name, port, authz, echo=PROBE_ECHO))
        admin_port = free_port()
        bootstrap = {
            "admin": {"address": address(admin_port)},
            "static_resources": {"listeners": listeners, "clusters": clusters},
        }
        self.envoy = self.parts.add(EnvoyProcess.start(bootstrap, log_dir=self.workdir / "envoy", admin_port=admin_port))
        self.envoy.wait_live(30)
        for name, port in self.listener_ports.items():
            self.envoy.process.wait_until(functools.partial(port_open, port), 30, f"listener {name} on :{port}")
        log = Path(self.envoy.process.log_path).read_text(errors="replace")
        deprecated = sorted({line.split("Using deprecated option ", 1)[1].split(" ", 1)[0] for line in log.splitlines()
                             if "Using deprecated option " in line})
        return {
            "envoy_deprecation_warnings": deprecated,
            "start_s": round(time.monotonic() - started, 2),
            "envoy_pid": self.envoy.pid,
            "servers": {k: {"pid": p.pid, "port": self.server_ports[k]} for k, p in self.servers.items()},
            "bootstrap": str(self.envoy.config_path),
        }

    # -- single requests -------------------------------------------------------------

    def get(self, listener_name: str, path: str, headers: dict[str, str], method: str = "GET", body: bytes | None = None,
            conn: Any = None) -> dict[str, Any]:
        own = conn is None
        if own:
            conn = http.client.HTTPConnection("127.0.0.1", self.listener_ports[listener_name], timeout=10)
        started = time.perf_counter()
        conn.request(method, path, body=body, headers=headers)
        reply = conn.getresponse()
        data = reply.read()
        elapsed = time.perf_counter() - started
        if own:
            conn.close()
        return {"status": reply.status, "headers": [[k.lower(), v] for k, v in reply.getheaders()], "body": data.decode("latin-1")[:200],
                "ms": round(elapsed * 1000, 1)}

    def preflight(self, name: str) -> dict[str, Any]:
        """With the bearer header: 200 and (ext_authz scenarios) x-seen-user-id: alice; without: 401."""
        good = self.get(name, "/api/thing?x=1", {"Authorization": "Bearer x"})
        transport = SCENARIOS[name].transport
        seen = dict(good["headers"]).get("x-user-id" if transport == "proxy" else "x-seen-user-id")
        expected_seen = "alice" if transport else None
        if good["status"] != 200 or seen != expected_seen:
            raise RuntimeError(f"{name}: preflight with a bearer token: {good}")
        if SCENARIOS[name].transport:
            bad = self.get(name, "/api/thing", {})
            if bad["status"] != 401:
                raise RuntimeError(f"{name}: preflight without authorization: expected 401, got {bad}")
        return {"ok": True}

    # -- probe -----------------------------------------------------------------------

    def probe(self) -> dict[str, Any]:
        def events(mark: int = 0) -> list[dict[str, Any]]:
            with open(self.probe_dump) as dump:
                return [json.loads(line) for line in dump if line.strip()][mark:]

        def compact(reply: dict[str, Any]) -> dict[str, Any]:
            """The client's view: status, headers (without date/server), body, ms."""
            headers = [f"{k}: {v}" for k, v in reply["headers"] if k not in ("date", "server")]
            return {"status": reply["status"], "headers": headers, "body": reply["body"], "ms": reply["ms"]}

        client_headers = {"Authorization": "Bearer x", "X-Custom": "kept?", "User-Agent": "probe", "X-User-Id": "mallory"}
        path = "/api/items/allow?q=1"
        checks: dict[str, Any] = {}
        # The check request as Envoy sends it, per header-forwarding variant (GET with a query; POST with a body).
        for variant in PROBE_VARIANTS:
            for label, method, body in (("GET", "GET", None), ("POST_with_body", "POST", b"hello=world")):
                mark = len(events())
                reply = self.get(f"probe_{variant}", path, client_headers, method=method, body=body)
                time.sleep(0.05)
                requests = [e for e in events(mark) if e["event"] == "request"]
                checks[f"{variant}/{label}"] = {
                    "check_request": requests[0]["head"].split("\r\n") if requests else None,
                    "check_request_body_bytes": len(requests[0]["body"]) if requests else None,
                    "upstream_saw": [h for h in compact(reply)["headers"] if h.startswith("x-seen-")],
                }
        # What each answer of the authorization server becomes for the client (top-level allowed_headers listener).
        outcomes: dict[str, Any] = {}
        for case, answer in PROBE_CASES.items():
            headers = {k: v for k, v in client_headers.items() if k != "X-User-Id" or case == "allow-nouser"}
            before = self.envoy.stats(r"probe_top_level\.ext_authz\.")
            reply = self.get("probe_top_level", f"/api/{case}", headers)
            after = self.envoy.stats(r"probe_top_level\.ext_authz\.")
            counters = {k.rsplit(".", 1)[1]: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0)}
            outcomes[case] = {"authz_answered": answer, "client_got": compact(reply), "envoy_ext_authz": counters}
        time.sleep(PROBE_SLOW_S + 0.1)
        # Connection reuse: 20 sequential requests on one client connection, 20 on a new client connection each,
        # then 5 that the authorization server answers with connection: close.
        reuse: dict[str, Any] = {}
        for label in ("20_requests_one_client_connection", "20_requests_new_client_connection_each", "5_answers_with_connection_close"):
            mark = len(events())
            conn = http.client.HTTPConnection("127.0.0.1", self.listener_ports["probe_top_level"], timeout=10) if label.endswith("one_client_connection") else None
            target = "/api/allow-close" if label.startswith("5_") else "/api/keepalive"
            for _ in range(5 if label.startswith("5_") else 20):
                self.get("probe_top_level", target, {"Authorization": "Bearer x"}, conn=conn)
            if conn is not None:
                conn.close()
            time.sleep(0.05)
            got = events(mark)
            reuse[label] = {"checks": sum(e["event"] == "request" for e in got), "new_authz_connections": sum(e["event"] == "connect" for e in got),
                            "authz_connections_closed": sum(e["event"] == "close" for e in got)}
        return {"ext_authz_timeout_ms": PROBE_TIMEOUT_MS, "path_prefix": "/probe-<variant>",
                "client_request": {"path": path, "headers": client_headers},
                "route_echoes_request_headers": {f"x-seen-{h.removeprefix('x-')}": f"%REQ({h})%" for h in PROBE_ECHO},
                "header_variants": {"top_level": "ExtAuthz.allowed_headers: [exact authorization]",
                                    "legacy": "http_service.authorization_request.allowed_headers: [exact authorization] (deprecated field)",
                                    "none": "no allowed_headers at all"},
                "check_requests": checks, "outcomes": outcomes, "connection_reuse": reuse,
                "slow_answers_found_connection_closed": sum(e["event"] == "reply-on-closed" for e in events())}

    # -- load --------------------------------------------------------------------------

    def wrk(self, name: str, duration: int, log_name: str, connections: int | None = None) -> dict[str, Any]:
        url = f"http://127.0.0.1:{self.listener_ports[name]}{SCENARIOS[name].path}"
        connections = connections or self.args.connections
        argv = wrk_command(url, threads=min(self.args.threads, connections), connections=connections, duration=duration, script=self.lua,
                           headers=("Authorization: Bearer x",))
        return run_wrk(argv, duration, self.workdir, log_name, stdev=False)

    def authz_stats(self, name: str) -> dict[str, int]:
        stats = self.envoy.stats(rf"^http\.{name}\.ext_authz\.")
        return {k.rsplit(".", 1)[1]: v for k, v in stats.items()}

    def cluster_stats(self, kind: str, role: str = "authz") -> dict[str, int]:
        wanted = ("upstream_cx_total", "upstream_cx_active", "upstream_rq_total", "upstream_rq_pending_total",
                  "upstream_rq_pending_overflow", "upstream_rq_timeout", "upstream_cx_destroy_remote", "upstream_cx_destroy_local",
                  "upstream_cx_destroy_local_with_active_rq", "upstream_rq_5xx")
        stats = self.envoy.stats(rf"^cluster\.{role}_{kind}\.upstream_(cx|rq)_")
        return {k.rsplit(".", 1)[1]: v for k, v in stats.items() if k.rsplit(".", 1)[1] in wanted}

    def run(self, name: str, round_index: int) -> dict[str, Any]:
        spec = SCENARIOS[name]
        self.preflight(name)
        if self.args.warmup > 0:
            self.wrk(name, self.args.warmup, f"warmup-{name}-r{round_index}")
        server = self.servers.get(spec.server)
        server_pid = server.pid if server is not None else None
        envoy_pid = self.envoy.pid
        authz_before = self.authz_stats(name) if spec.transport not in (None, "proxy") else {}
        cluster_before = self.cluster_stats(spec.server, "upstream" if spec.transport == "proxy" else "authz") if spec.transport else {}
        server_sys_before = cpu_times(server_pid)[1] if server_pid else 0.0
        switches_before = context_switches(server_pid) if server_pid else 0
        window = CpuWindow({"envoy": envoy_pid, **({"server": server_pid} if server_pid else {})})
        load = self.wrk(name, self.args.duration, f"{name}-r{round_index}")
        cpu = {"server": 0.0, **window.used()}
        server_sys = (cpu_times(server_pid)[1] - server_sys_before) if server_pid else 0.0
        switches = (context_switches(server_pid) - switches_before) if server_pid else 0
        requests = max(1, load["requests"])
        result: dict[str, Any] = {"scenario": name, "round": round_index, **load}
        if spec.transport == "proxy":
            cl_after = self.cluster_stats(spec.server, "upstream")
            result["upstream_cluster"] = {k: v - cluster_before.get(k, 0) for k, v in cl_after.items() if k != "upstream_cx_active"}
        elif spec.transport:
            after = self.authz_stats(name)
            result["envoy_ext_authz"] = delta(authz_before, after)
            cl_after = self.cluster_stats(spec.server)
            result["authz_cluster"] = {k: v - cluster_before.get(k, 0) for k, v in cl_after.items() if k != "upstream_cx_active"}
            result["authz_cluster"]["upstream_cx_active_after"] = cl_after.get("upstream_cx_active")
            ok = result["envoy_ext_authz"].get("ok", 0)
            # wrk's count excludes requests still in flight when it stops (up to -c of them), and checks of the
            # warm-up's last in-flight requests can complete after the "before" snapshot (up to -c more).
            result["checks_match_requests"] = abs(ok - load["requests"]) <= 2 * self.args.connections and not any(
                result["envoy_ext_authz"].get(k) for k in ("denied", "error", "failure_mode_allowed"))
        result["cpu"] = {
            **request_costs(cpu, ("envoy", "wrk"), requests),
            "server_us_per_request": round(cpu["server"] * 1e6 / requests, 1) if server_pid else None,
            "server_cores": round(cpu["server"] / cpu["wall"], 3) if server_pid else None,
            "server_kernel_share": round(server_sys / cpu["server"], 3) if server_pid and cpu["server"] else None,
            "server_context_switches_per_request": round(switches / requests, 3) if server_pid else None,
            **machine_costs(cpu, ("envoy", "server", "wrk"), window.load_average),
        }
        if self.args.unloaded_duration > 0:
            unloaded = self.wrk(name, self.args.unloaded_duration, f"{name}-r{round_index}-c1", connections=1)
            result["unloaded_c1"] = {"rps": unloaded["rps"], "latency_ms": unloaded["latency_ms"], "status_errors": unloaded["status_errors"]}
        c = result["cpu"]
        progress(f"  r{round_index} {name:<30} {load['rps']:>8.0f} req/s  p50 {load['latency_ms']['p50']:.2f} ms  p99 {load['latency_ms']['p99']:.2f} ms  "
                 f"envoy {c['envoy_us_per_request']} us/req  server {c['server_us_per_request']} us/req  other {c['other_processes_cores']} cores  "
                 f"status errors {load['status_errors']}{'' if result.get('checks_match_requests', True) else '  CHECKS MISMATCH'}")
        return result


# == summary ============================================================================


def _median(values: list[float | None]) -> float | None:
    return median(values, 1)


def summarise(runs: list[dict[str, Any]], names: list[str], quiet_cores: float) -> dict[str, Any]:
    by_name: dict[str, list[dict[str, Any]]] = {n: [r for r in runs if r["scenario"] == n] for n in names}
    baseline_rps = _median([r["rps"] for r in by_name.get("baseline_direct", [])])
    baseline_envoy = _median([r["cpu"]["envoy_us_per_request"] for r in by_name.get("baseline_direct", [])])
    baseline_by_round = {r["round"]: r["rps"] for r in by_name.get("baseline_direct", [])}
    table = []
    for name in names:
        rows = by_name[name]
        if not rows:
            continue
        rps_median = _median([r["rps"] for r in rows])
        envoy_median = _median([r["cpu"]["envoy_us_per_request"] for r in rows])
        rps = [r["rps"] for r in rows]
        envoy = [r["cpu"]["envoy_us_per_request"] for r in rows]
        server = [r["cpu"]["server_us_per_request"] for r in rows]
        entry: dict[str, Any] = {
            "scenario": name,
            "rps_median": _median(rps),
            "rps_runs": rps,
            "rps_spread_pct": spread_pct(rps),
            "rps_over_baseline_A": round(rps_median / baseline_rps, 3) if baseline_rps and rps_median else None,
            "rps_over_baseline_A_same_round": [round(r["rps"] / baseline_by_round[r["round"]], 3) for r in rows if baseline_by_round.get(r["round"])],
            "p50_ms_median": median([r["latency_ms"]["p50"] for r in rows], 3),
            "p99_ms_median": median([r["latency_ms"]["p99"] for r in rows], 3),
            "p99_ms_runs": [r["latency_ms"]["p99"] for r in rows],
            "envoy_us_per_request_median": _median(envoy),
            "envoy_us_per_request_runs": envoy,
            "envoy_us_added_over_baseline": round(envoy_median - baseline_envoy, 1) if baseline_envoy is not None and envoy_median is not None else None,
            "server_us_per_request_median": _median(server),
            "server_us_per_request_runs": server,
            "server_us_spread_pct": spread_pct(server),
            "server_ctx_switches_per_request_median": _median([r["cpu"]["server_context_switches_per_request"] for r in rows]),
            "server_kernel_share_median": median([r["cpu"]["server_kernel_share"] for r in rows], 3),
            "envoy_plus_server_us_median": _median([(r["cpu"]["envoy_us_per_request"] + (r["cpu"]["server_us_per_request"] or 0)) for r in rows]),
            "other_processes_cores_max": max(r["cpu"]["other_processes_cores"] for r in rows),
            "quiet_runs": len(quiet := [r for r in rows if r["cpu"]["other_processes_cores"] <= quiet_cores]),
            "rps_median_quiet": _median([r["rps"] for r in quiet]),
            "envoy_us_per_request_median_quiet": _median([r["cpu"]["envoy_us_per_request"] for r in quiet]),
            "server_us_per_request_median_quiet": _median([r["cpu"]["server_us_per_request"] for r in quiet]),
            "unloaded_c1_p50_ms_median": median([r["unloaded_c1"]["latency_ms"]["p50"] for r in rows if "unloaded_c1" in r], 3),
            "unloaded_c1_p99_ms_median": median([r["unloaded_c1"]["latency_ms"]["p99"] for r in rows if "unloaded_c1" in r], 3),
            "all_checks_ok": all(r.get("checks_match_requests", True) and r["status_errors"] == 0 and not r["socket_errors"] for r in rows),
        }
        table.append(entry)
    http = [t for t in table if t["scenario"].startswith("http_") and not t["scenario"].endswith("_raw")]
    verdict: dict[str, Any] = {}
    if http:
        def server_us_of(t: dict[str, Any]) -> float:
            return t["server_us_per_request_median_quiet"] or t["server_us_per_request_median"] or float("inf")

        def rps_of(t: dict[str, Any]) -> float:
            return t["rps_median_quiet"] or t["rps_median"] or 0.0

        cheapest = min(http, key=server_us_of)
        fastest = max(http, key=rps_of)
        verdict = {
            "cheapest_server_cpu": cheapest["scenario"],
            "highest_rps": fastest["scenario"],
            "server_us_per_request_by_scenario": {t["scenario"]: server_us_of(t) for t in table if t["server_us_per_request_median"] is not None},
            "rps_by_scenario": {t["scenario"]: rps_of(t) for t in table},
            "note": "medians over quiet runs where there are any, else over all runs; the *_raw scenarios (hand parser) are a "
                    "lower bound, left out of the verdict",
        }
    return {"table": table, "verdict": verdict}


def machine() -> dict[str, Any]:
    info = describe(("uvloop", "httptools", "h11", "aiohttp", "grpcio", "protobuf", "xds-protos"), ("bench",))
    try:
        import aiohttp.http_parser as parser

        info["aiohttp_request_parser"] = f"{parser.HttpRequestParser.__module__}.{parser.HttpRequestParser.__name__}"
    except Exception:  # noqa: BLE001 - informational
        pass
    return info


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_wrk_arguments(parser, duration=10, threads=1, warmup_help="seconds of unmeasured load before each measured run (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=2, help="measure every scenario this many times, interleaved (default: %(default)s)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated (default: all): " + ", ".join(SCENARIOS))
    parser.add_argument("--authz-connections", type=int, default=32,
                        help="max_connections of each HTTP authz cluster: Envoy's HTTP/1.1 pool size (default: %(default)s)")
    parser.add_argument("--authz-timeout", default="1s", help="ext_authz timeout (default: %(default)s)")
    parser.add_argument("--unloaded-duration", type=int, default=3,
                        help="after each measured run, this many seconds of wrk -c1 for unloaded latency (0: none; default: %(default)s)")
    parser.add_argument("--quiet-cores", type=float, default=0.25,
                        help="runs where other processes used at most this many cores count as quiet in the *_quiet medians (default: %(default)s)")
    parser.add_argument("--no-probe", action="store_true", help="skip the probe of Envoy's HTTP ext_authz behaviour")
    add_workdir_arguments(parser)
    args = parser.parse_args(argv)
    chosen(parser, args.scenarios, SCENARIOS)
    check_wrk_arguments(parser, args)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    require_wrk()
    names = [n for n in args.scenarios.split(",") if n]
    runs: list[dict[str, Any]] = []
    with Run("authz_transports", argv, args, progress) as run:
        run.report["settings"] = {
            "duration_s": args.duration, "rounds": args.rounds, "warmup_s": args.warmup,
            "wrk": f"-t{args.threads} -c{args.connections} -H 'Authorization: Bearer x' --latency",
            "envoy_concurrency": 1, "authz_http_pool_max_connections": args.authz_connections, "authz_timeout": args.authz_timeout,
            "http_path_prefix": CHECK_PREFIX, "unloaded_wrk": f"-t1 -c1 -d{args.unloaded_duration}s after each measured run",
            "quiet_run": f"other processes (machine busy - Envoy - server - wrk) <= {args.quiet_cores} cores", "order": "round r runs the scenarios in order when r is even, reversed when odd",
        }
        run.report["scenarios"] = {n: SCENARIOS[n].description for n in names}
        run.report["machine"] = machine()
        bench = TransportBench(args, run)
        progress(f"starting {len(bench.names)} listeners, authorization servers and Envoy")
        run.report["stack"] = bench.start()
        if not args.no_probe:
            progress("probing Envoy's HTTP ext_authz behaviour")
            run.report["probe"] = bench.probe()
        for round_index in range(args.rounds):
            progress(f"round {round_index + 1}/{args.rounds}")
            for name in round_order(names, round_index):
                runs.append(bench.run(name, round_index))
    summary = summarise(runs, names, args.quiet_cores)
    for row in summary["table"]:
        progress(f"{row['scenario']:<30} {row['rps_median']:>8} req/s ({row['rps_over_baseline_A']}x A, spread {row['rps_spread_pct']}%)  "
                 f"p50 {row['p50_ms_median']} p99 {row['p99_ms_median']} ms  envoy {row['envoy_us_per_request_median']} us  "
                 f"server {row['server_us_per_request_median']} us (spread {row['server_us_spread_pct']}%)")
    base: dict[str, Any] = next((row for row in summary["table"] if row["scenario"] == "baseline_direct"), {})
    run.print(
        baseline={"scenario": "baseline_direct", "rps_median": base.get("rps_median"),
                  "envoy_us_per_request_median": base.get("envoy_us_per_request_median")},
        ratios={row["scenario"]: {"rps_over_baseline_A": row["rps_over_baseline_A"],
                                  "rps_over_baseline_A_same_round": row["rps_over_baseline_A_same_round"]}
                for row in summary["table"] if row["scenario"] != "baseline_direct"},
        summary=summary, runs=runs,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
