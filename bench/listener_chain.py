"""What the stable listener costs a request: Gatehouse's listener against a router-only one
and against the same listener without the filters that do nothing for the request, in one
Envoy, one run.

Every Gatehouse listener carries every feature's HTTP filter, inert unless a route turns it
on (``typed_per_filter_config``), so a route feature is an RDS change and never rewrites the
listener (which would drain its connections). The price is paid per request: Envoy builds
every filter of the chain for each stream and asks each whether it has work. One Envoy
(``--concurrency 1``, one worker), four static listeners on 127.0.0.1, one route each
answering 200 itself:

    router_only     a minimal HTTP connection manager, only the router, a direct_response
                    (bench.kit.envoy_config): the baseline, (a)
    on_demand       stable_default without the filters that do nothing for this route (each
                    named with its reason in the report): what a listener built from the
                    routes would carry; the stable design's own cost is stable_* ÷ this
    stable_default  the translator's listener for the default gateway, as emitted, for the
                    route ``disabled: {status: 200, body: ok}``, ``auth.required: false``: (b)
    stable_full     the same for a gateway with ``extAuthz``, ``rateLimit`` and
                    ``gateway.loadShedding``: every filter a public route passes inert, (c)
    inert_x10       stable_full with each inert filter 10 times (copies renamed, with the
                    route's per-filter config copied): the inert filters' cost, amplified
                    out of the noise, is (inert_x10 − stable_full) ÷ 9

The translated listeners are the translator's (``RouteTranslator`` → ``render``), made
static the way ``envoy --mode validate`` sees the golden cases (tests/harness/static_bootstrap.py:
the RouteConfiguration inline instead of RDS); only their name, address and the connection
manager's ``stat_prefix`` are changed, so four can sit side by side. ``stable_full``'s
ext_authz and ratelimit clusters point at a closed port on 127.0.0.1: a filter that called
out would answer 503 or 500 and fail the run (``expect_status``), and the report's
``service_calls`` shows none was made. Access log and tracing stay off: they work on every
request (bench.accesslog, docs/tracing.md measure them); they are not inert.

Scenarios run ``--rounds`` times, even rounds in order, odd ones reversed; each run:
``--warmup`` s of unmeasured load, then ``wrk -t -c -d --latency`` with Envoy's CPU
(utime+stime, /proc) around it. Reported: per-scenario medians over rounds (rps, latency,
Envoy µs of CPU per request), and ratios to ``router_only`` and to ``on_demand`` taken per
round (neighbouring runs) and then the median: on a shared 2-core machine the absolute
figures drift, the ratios of neighbours less.

    .venv/bin/python -m bench.listener_chain > bench/results/listener-chain.json
    .venv/bin/python -m bench.listener_chain --duration 3 --warmup 1 --rounds 1

One JSON document goes to stdout; progress to stderr. See bench/README.md.
"""

from __future__ import annotations

import argparse
import copy
from dataclasses import dataclass
from typing import Any

import yaml

from bench.kit.envoy_config import address, http_connection_manager
from bench.kit.machine import describe, wait_quiet
from bench.kit.processes import CpuWindow, machine_costs, request_costs
from bench.kit.run import Bench, Progress, Run, Scenario, add_workdir_arguments, chosen, round_order
from bench.kit.stats import median, median_at, ratio, spread_pct
from bench.kit.wrk import LUA_DONE, add_wrk_arguments, check_wrk_arguments, require_wrk, run_wrk, wrk_command, wrk_settings
from control_plane.config import ControlPlaneConfig
from control_plane.model import Origin, parse_route_file
from control_plane.render import resource_data
from control_plane.translator import RouteTranslator
from control_plane.translator.from_config import gateway_settings
from tests.harness.envoy import EnvoyProcess
from tests.harness.http_client import get as http_get
from tests.harness.ports import free_port
from tests.harness.processes import port_open
from tests.harness.route_repo import route_doc
from tests.harness.static_bootstrap import static_bootstrap

PATH = "/direct"
BODY = "ok"
COPIES = 10
"""How many times inert_x10 carries each inert filter."""


@dataclass(frozen=True, kw_only=True)
class ChainScenario(Scenario):
    listener: str
    """How the listener is built: router_only, on_demand, translated or amplified (with ``gateway``)."""
    gateway: str = "default"
    """The control-plane config the translated listener is for: default or full."""


SCENARIOS = [
    ChainScenario("router_only", PATH, "minimal HCM, only the router, direct_response 200 (baseline, a)", listener="router_only"),
    ChainScenario("on_demand", PATH, "stable_default without the filters inert for this route: a listener built from the routes",
                  listener="on_demand"),
    ChainScenario("stable_default", PATH, "the translator's listener, default gateway, for a public disabled {status: 200} route (b)",
                  listener="translated"),
    ChainScenario("stable_full", PATH, "the translator's listener with extAuthz + rateLimit + loadShedding, same route (c)",
                  listener="translated", gateway="full"),
    ChainScenario("inert_x10", PATH, f"stable_full with each inert filter {COPIES} times: amplifies their cost", listener="amplified",
                  gateway="full"),
]
BY_NAME = {s.name: s for s in SCENARIOS}

progress = Progress("listener_chain")


# -- the listeners --------------------------------------------------------------------------


def control_plane_config(gateway: str, port: int, closed_port: int) -> dict[str, Any]:
    """The config file's blocks the translated listener is for, as an operator writes them."""
    config: dict[str, Any] = {"gateway": {"listenerAddress": "127.0.0.1", "listenerPort": port}, "sources": {}}
    if gateway == "full":
        config["gateway"]["loadShedding"] = {"latencyTarget": "200ms", "maxConcurrency": 500}
        config["extAuthz"] = {"address": f"127.0.0.1:{closed_port}"}
        config["rateLimit"] = {"address": f"127.0.0.1:{closed_port}"}
    return config


def route_yaml() -> bytes:
    doc = route_doc("direct", {"match": {"pathPrefix": PATH}, "auth": {"required": False}, "disabled": {"status": 200, "body": BODY}},
                    namespace="bench")
    return yaml.safe_dump(doc, sort_keys=False).encode()


def translated(name: str, config: dict[str, Any]) -> dict[str, Any]:
    """The translator's listener for ``config`` and the route, with its route configuration
    inline and its clusters: ``static_resources`` of its own."""
    settings = gateway_settings(parsed := ControlPlaneConfig.model_validate(config), parsed.gateway)
    routes, problems = parse_route_file(route_yaml(), Origin("file", "bench.yaml"))
    if problems:
        raise RuntimeError(f"the bench route is invalid: {[str(p) for p in problems]}")
    translator = RouteTranslator(settings)
    translation = translator.translate(routes)
    if translator.problems:
        raise RuntimeError(f"the translator refused the bench route: {translator.problems}")
    static = static_bootstrap([resource_data(r) for r in translation.listeners], [resource_data(r) for r in translation.routes],
                              [resource_data(r) for r in translation.clusters], [])["static_resources"]
    [listener] = static["listeners"]
    listener["name"] = name
    hcm(listener)["stat_prefix"] = name
    return {"listener": listener, "clusters": static["clusters"]}


def hcm(listener: dict[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = listener["filter_chains"][0]["filters"][0]["typed_config"]
    return config


def why_inert(http_filter: dict[str, Any], route: dict[str, Any]) -> str | None:
    """Why the filter does nothing for ``route`` (the translated route entry), or None if it
    may: the filters a listener built from this route set would leave out."""
    name, config = http_filter["name"], http_filter.get("typed_config", {})
    per_route = route.get("typed_per_filter_config", {})
    kind = config.get("@type", "").rsplit(".", 1)[-1]
    if http_filter.get("disabled") and name not in per_route:
        return "disabled in the chain; the route does not turn it on"
    if per_route.get(name, {}).get("disabled"):
        return "the route's typed_per_filter_config disables it"
    if name in per_route:
        return None
    if kind == "RBAC" and "rules" not in config:
        return "RBAC without rules (the route sets none)"
    if kind == "LocalRateLimit" and "token_bucket" not in config:
        return "local_ratelimit without a bucket (the route sets none)"
    if kind == "RateLimit" and not route.get("route", {}).get("rate_limits"):
        return "ratelimit filter; the route has no rate_limits actions"
    if kind == "HeaderMutation" and not config.get("mutations"):
        return "header_mutation without mutations (the route sets none)"
    return None


def on_demand(stable: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """``stable`` without the filters inert for its one route, and those filters with why."""
    listener = copy.deepcopy(stable["listener"])
    config = hcm(listener)
    [route] = [r for vhost in config["route_config"]["virtual_hosts"] for r in vhost["routes"]]
    dropped = {f["name"]: why for f in config["http_filters"] if (why := why_inert(f, route)) is not None}
    config["http_filters"] = [f for f in config["http_filters"] if f["name"] not in dropped]
    if config["http_filters"][-1]["name"] != "envoy.filters.http.router":
        raise RuntimeError("the on-demand chain lost its router")
    listener["name"] = config["stat_prefix"] = "on_demand"
    return {"listener": listener, "clusters": stable["clusters"]}, dropped


def amplified(stable: dict[str, Any], copies: int) -> tuple[dict[str, Any], list[str]]:
    """``stable`` with each filter inert for its route ``copies`` times (``<name>.copy<k>``
    after the original, the route's per-filter config copied to each), and their names."""
    listener = copy.deepcopy(stable["listener"])
    config = hcm(listener)
    [route] = [r for vhost in config["route_config"]["virtual_hosts"] for r in vhost["routes"]]
    per_route = route.get("typed_per_filter_config", {})
    chain, inert = [], []
    for http_filter in config["http_filters"]:
        chain.append(http_filter)
        if why_inert(http_filter, route) is None:
            continue
        inert.append(http_filter["name"])
        for k in range(2, copies + 1):
            name = f"{http_filter['name']}.copy{k}"
            chain.append({**copy.deepcopy(http_filter), "name": name})
            if http_filter["name"] in per_route:
                per_route[name] = copy.deepcopy(per_route[http_filter["name"]])
    config["http_filters"] = chain
    return {"listener": listener, "clusters": stable["clusters"]}, inert


def router_only(port: int) -> dict[str, Any]:
    route = {"match": {"prefix": PATH}, "direct_response": {"status": 200, "body": {"inline_string": BODY}}}
    return {"name": "router_only", "address": address(port), "filter_chains": [{"filters": [http_connection_manager("router_only", [route], [])]}]}


@dataclass
class Listeners:
    bootstrap: dict[str, Any]
    ports: dict[str, int]
    filters: dict[str, list[str]]
    dropped_as_inert: dict[str, str]
    amplified: list[str]
    """The filters inert_x10 carries COPIES times."""
    configs: dict[str, dict[str, Any]]
    """The control-plane config each translated listener is for."""


def build(wanted: list[str]) -> Listeners:
    """One bootstrap with a listener per wanted scenario (on_demand needs stable_default's)."""
    ports = {name: free_port() for name in wanted}
    closed = free_port()
    configs: dict[str, dict[str, Any]] = {}
    listeners: dict[str, dict[str, Any]] = {}
    clusters: dict[str, dict[str, Any]] = {}
    dropped: dict[str, str] = {}
    copied: list[str] = []
    for name in wanted:
        scenario = BY_NAME[name]
        if scenario.listener == "router_only":
            listeners[name] = router_only(ports[name])
            continue
        gateway = "default" if scenario.listener == "on_demand" else scenario.gateway
        configs[name] = control_plane_config(gateway, ports[name], closed)
        built = translated(name, configs[name])
        if scenario.listener == "on_demand":
            built, dropped = on_demand(built)
        elif scenario.listener == "amplified":
            built, copied = amplified(built, COPIES)
        listeners[name] = built["listener"]
        clusters.update({c["name"]: c for c in built["clusters"]})
    for name, listener in listeners.items():
        listener["address"] = address(ports[name])
    filters = {name: [f["name"] for f in hcm(listener)["http_filters"]] for name, listener in listeners.items() if name != "inert_x10"}
    bootstrap = {"static_resources": {"listeners": list(listeners.values()), "clusters": list(clusters.values())}}
    return Listeners(bootstrap, ports, filters, dropped, copied, configs)


# -- the run --------------------------------------------------------------------------------


class ChainBench(Bench):
    def __init__(self, args: argparse.Namespace, run: Run, listeners: Listeners) -> None:
        super().__init__(args, run)
        self.listeners = listeners
        self.lua = self.workdir / "report.lua"
        self.lua.write_text(LUA_DONE)

    def start(self) -> dict[str, Any]:
        admin = free_port()
        self.envoy = self.parts.add(EnvoyProcess.start({**self.listeners.bootstrap, "admin": {"address": address(admin)}},
                                                       log_dir=self.workdir / "envoy", admin_port=admin, name="envoy-listener-chain"))
        self.envoy.wait_live(30)
        probes = {}
        for name, port in self.listeners.ports.items():
            self.envoy.process.wait_until(lambda: port_open(port), 30, f"listener {name} on :{port}")
            reply = http_get(port, PATH)
            if reply.status != 200 or reply.body != BODY.encode():
                raise RuntimeError(f"{name}: {PATH} answered {reply.status} {reply.body[:200]!r}")
            probes[name] = {"status": reply.status, "server": reply.headers.get("server"),
                            "x_request_id": "x-request-id" in reply.headers}
        return probes

    def wrk(self, port: int, duration: int, log_name: str) -> dict[str, Any]:
        argv = wrk_command(f"http://127.0.0.1:{port}{PATH}", threads=self.args.threads, connections=self.args.connections,
                           duration=duration, script=self.lua)
        return run_wrk(argv, duration, self.workdir, log_name, stdev=False)

    def run(self, scenario: ChainScenario, round_index: int) -> dict[str, Any]:
        port = self.listeners.ports[scenario.name]
        if self.args.warmup > 0:
            self.wrk(port, self.args.warmup, f"{scenario.name}-{round_index}-warmup")
        quiet = wait_quiet(self.args.quiet_cores, self.args.quiet_wait)
        window = CpuWindow({"envoy": self.envoy.pid})
        load = self.wrk(port, self.args.duration, f"{scenario.name}-{round_index}")
        used = window.used()
        if not scenario.status_as_expected(load) or load["socket_errors"]:
            raise RuntimeError(f"{scenario.name}: {load['status_errors']} non-2xx answers, socket errors {load['socket_errors']}")
        result = {"scenario": scenario.name, "round": round_index + 1, **load, "quiet_wait": quiet,
                  "cpu": {**request_costs(used, ("envoy", "wrk"), load["requests"]), **machine_costs(used, ("envoy", "wrk"), window.load_average)}}
        progress(f"{scenario.name:<15} round {round_index + 1}: {load['rps']:>9} rps  p50 {load['latency_ms']['p50']} ms  "
                 f"p99 {load['latency_ms']['p99']} ms  envoy {result['cpu']['envoy_us_per_request']} us/req")
        return result

    def service_calls(self) -> dict[str, int]:
        """Requests and connections to the ext_authz and ratelimit clusters: 0 if inert."""
        stats = self.envoy.stats("^cluster\\.gatehouse_(ext_authz|ratelimit)\\.(upstream_rq_total|upstream_cx_total)$")
        return dict(sorted(stats.items()))


# -- the summary ----------------------------------------------------------------------------


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "rps": median_at(runs, "rps", digits=1),
        "rps_spread_pct": spread_pct([r["rps"] for r in runs]),
        "latency_ms": {p: median_at(runs, "latency_ms", p) for p in ("p50", "p90", "p99", "p99.9", "mean")},
        "envoy_us_per_request": median_at(runs, "cpu", "envoy_us_per_request", digits=2),
        "envoy_cores": median_at(runs, "cpu", "envoy_cores"),
        "other_processes_cores": median_at(runs, "cpu", "other_processes_cores"),
        "rounds": len(runs),
    }


def at(run: dict[str, Any], keys: tuple[str, ...]) -> float:
    value: Any = run
    for key in keys:
        value = value[key]
    return float(value)


def per_round(results: dict[str, list[dict[str, Any]]], a: str, b: str, *keys: str) -> dict[str, Any] | None:
    """a ÷ b per round (the two measured a minute or so apart), and their median."""
    if a not in results or b not in results:
        return None
    values = [ratio(at(run_a, keys), at(run_b, keys)) for run_a, run_b in zip(results[a], results[b])]
    return {"median": median(values, 3), "per_round": values}


def added_us(results: dict[str, list[dict[str, Any]]], a: str, b: str) -> float | None:
    """Envoy µs of CPU per request that ``a`` adds to ``b``, per round, median."""
    if a not in results or b not in results:
        return None
    return median([ra["cpu"]["envoy_us_per_request"] - rb["cpu"]["envoy_us_per_request"] for ra, rb in zip(results[a], results[b])], 2)


def inert_cost(results: dict[str, list[dict[str, Any]]], inert: list[str]) -> dict[str, Any] | None:
    """What stable_full's inert filters cost a request, from inert_x10: (x10 − full) ÷ 9 per
    round, median; per filter; as a share of stable_full's Envoy CPU per request."""
    if "inert_x10" not in results or "stable_full" not in results or not inert:
        return None
    per_round_us = [(x["cpu"]["envoy_us_per_request"] - f["cpu"]["envoy_us_per_request"]) / (COPIES - 1)
                    for x, f in zip(results["inert_x10"], results["stable_full"])]
    us = median(per_round_us, 2)
    full_us = median_at(results["stable_full"], "cpu", "envoy_us_per_request")
    return {
        "filters": inert,
        "envoy_us_per_request": us,
        "envoy_us_per_request_per_round": [round(v, 2) for v in per_round_us],
        "envoy_us_per_filter": round(us / len(inert), 2) if us is not None else None,
        "share_of_stable_full": ratio(us, full_us),
        "method": f"(inert_x10 − stable_full) Envoy µs of CPU per request ÷ {COPIES - 1}, per round, median",
    }


def summarise(results: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    pairs = [(s, "router_only") for s in ("on_demand", "stable_default", "stable_full")] + [
        (s, "on_demand") for s in ("stable_default", "stable_full")] + [("inert_x10", "stable_full")]
    ratios: dict[str, Any] = {}
    for a, b in pairs:
        rps = per_round(results, a, b, "rps")
        if rps is None:
            continue
        ratios[f"{a}_over_{b}"] = {
            "rps": rps,
            "envoy_us_per_request": per_round(results, a, b, "cpu", "envoy_us_per_request"),
            "p50_latency": per_round(results, a, b, "latency_ms", "p50"),
            "p99_latency": per_round(results, a, b, "latency_ms", "p99"),
            "envoy_us_added": added_us(results, a, b),
        }
    return ratios


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_wrk_arguments(parser, duration=5, threads=1, connections=16, warmup=1)
    parser.add_argument("--rounds", type=int, default=10,
                        help="runs of every scenario, interleaved (odd rounds reversed); medians reported (default: %(default)s)")
    parser.add_argument("--scenarios", default=",".join(BY_NAME), help="which listeners (default: all)")
    parser.add_argument("--quiet-cores", type=float, default=0.0,
                        help="before each measured run wait until the machine's busy CPU is at most this (default 0: do not wait; "
                             "waiting spreads the runs a ratio compares apart in time)")
    parser.add_argument("--quiet-wait", type=float, default=10.0, help="the longest such wait, seconds (default: %(default)s)")
    add_workdir_arguments(parser)
    args = parser.parse_args(argv)
    chosen(parser, args.scenarios, BY_NAME)
    check_wrk_arguments(parser, args)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    require_wrk()
    wanted = [name for name in BY_NAME if name in args.scenarios.split(",")]
    listeners = build(wanted)
    results: dict[str, list[dict[str, Any]]] = {}
    with Run("listener_chain", argv, args, progress) as run:
        run.report["settings"] = {
            **wrk_settings(args), "rounds": args.rounds, "quiet_cores": args.quiet_cores, "quiet_wait_s": args.quiet_wait,
            "envoy_concurrency": 1, "route": yaml.safe_load(route_yaml()),
            "scenarios": {s.name: s.description for s in SCENARIOS if s.name in wanted},
            "control_plane_config": listeners.configs,
            "http_filters": listeners.filters, "dropped_as_inert_in_on_demand": listeners.dropped_as_inert,
            "copied_in_inert_x10": {"filters": listeners.amplified, "copies": COPIES},
        }
        run.report["machine"] = describe(("protobuf",), ("control_plane", "bench"))
        bench = ChainBench(args, run, listeners)
        (run.workdir / "bootstrap.yaml").write_text(yaml.safe_dump(listeners.bootstrap, sort_keys=False))
        progress(f"starting Envoy with {len(wanted)} listeners: {', '.join(wanted)}")
        probes = bench.start()
        for round_index in range(args.rounds):
            for scenario in round_order([BY_NAME[n] for n in wanted], round_index):
                results.setdefault(scenario.name, []).append(bench.run(scenario, round_index))
        calls = bench.service_calls()
    if any(calls.values()):
        raise RuntimeError(f"an inert filter called its service: {calls}")
    summary = {name: medians(runs) for name, runs in results.items()}
    baseline = summary.get("router_only")
    run.print(
        baseline={"scenario": "router_only", **baseline} if baseline else {"scenario": None},
        ratios=summarise(results),
        inert_filters=inert_cost(results, listeners.amplified),
        results_median=summary,
        probes=probes,
        service_calls=calls,
        runs=[r for runs in results.values() for r in runs],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
