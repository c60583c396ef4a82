"""How fast a failing upstream is noticed: the central route breaker (access log → telemetry
→ control plane → RDS) beside Envoy-native outlier detection, on one gateway in one run.

One gateway (control plane, Envoy, telemetry with ``breakerTallies``), five echo upstreams,
five routes, each loaded at a steady rate by its own keep-alive client:

    /central      circuitBreaker.errorRate {windowCalls 40, minimumCalls 20, 50 %}   --rate rps
    /central-50   the same, at half the rate: what the detector sees when telemetry  --rate/2
                  drops half of the entries (dropping entries at random thins the
                  stream evenly, so the counted calls are those of a lower rate)
    /central-90   the same at a tenth of the rate (90 % dropped)                      --rate/10
    /native-pct   outlierDetection {failurePercentage {threshold 50, minimumHosts 1,
                  requestVolume 20}, interval 1s, baseEjection 30s, maxEjectionPercent 100,
                  consecutive5xx 1000000 (off)}: the failure-rate rule alone         --rate
    /native       the same with Envoy's default consecutive5xx (5), as a user gets it --rate

After ``--warmup`` seconds of healthy traffic every upstream is turned failing at once
(``POST /admin/fail``: every answer 503) and the load runs ``--failing`` seconds more.
For each route, from the onset (medians over ``--rounds`` fresh gateways):

- ``detected_s``: the central board moved to OPEN (``GET /breakers/window``, polled every
  20 ms) / Envoy ejected the host (``outlier_detection.ejections_enforced_total``, polled);
- ``first_fallback_s``: the first answer that did not come from the failing upstream (no
  ``x-upstream`` header of its name): the breaker's fallback, or Envoy's own 503; null if
  none came (outlier detection: panic routing keeps proxying to the ejected host);
- ``upstream_share_after``: of the requests sent in the last second, the share that still
  reached the upstream (counted at the upstream): 0 for a breaker that holds the route
  OPEN; Envoy's panic routing keeps sending to an ejected lone host.

Ratios: native / central for ``detected_s`` and ``first_fallback_s``, and each dropped
sample against the full one. Envoy's access log: ``bufferSize 16384``, ``flushInterval``
from ``--als-flush`` (200ms; the default 1s adds up to 0.8 s to every central number).

    .venv/bin/python -m bench.breaker > bench/results/breaker.json     # 3 rounds, ~60 s
    .venv/bin/python -m bench.breaker --rounds 1 --warmup 2 --failing 3   # the quickest run

One JSON document goes to stdout; progress to stderr.
"""

from __future__ import annotations

import argparse
import functools
import json
import secrets
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.kit.machine import describe
from bench.kit.run import Parts, Progress, Run, add_workdir_arguments
from bench.kit.stats import median_of_all, ratio
from tests.harness.envoy import EnvoyProcess
from tests.harness.gateway import GatewayStack
from tests.harness.http_client import Client, wait_for
from tests.harness.route_repo import route_doc
from tests.harness.telemetry import TelemetryServiceProcess

CENTRAL = {"central": 1.0, "central-50": 0.5, "central-90": 0.1}
"""Route (and its upstream) → the share of entries the detector sees."""
NATIVE = "native"
NATIVE_PCT = "native-pct"
BREAKER = {"windowCalls": 40, "minimumCalls": 20, "failureRateThreshold": 50, "waitInOpen": "30s", "halfOpenProbes": 3}
OUTLIER = {
    "failurePercentage": {"threshold": 50, "minimumHosts": 1, "requestVolume": 20},
    "interval": "1s", "baseEjection": "30s", "maxEjectionPercent": 100,
}
OUTLIER_PCT = {**OUTLIER, "consecutive5xx": 1_000_000}


progress = Progress("breaker")


class Load(threading.Thread):
    """One route at a steady rate; records (send time, whether the upstream answered)."""

    def __init__(self, port: int, route: str, rate: float, stop: threading.Event) -> None:
        super().__init__(daemon=True, name=f"load-{route}")
        self.route, self.rate, self.stop_event = route, rate, stop
        self.client = Client(port, timeout=5)
        self.replies: list[tuple[float, bool, int]] = []

    def run(self) -> None:
        interval, due = 1.0 / self.rate, time.monotonic()
        while not self.stop_event.is_set():
            now = time.monotonic()
            if now < due:
                time.sleep(due - now)
            due += interval
            sent = time.monotonic()
            try:
                reply = self.client.request(f"/{self.route}/x")
            except OSError:
                self.replies.append((sent, False, 0))
                continue
            self.replies.append((sent, reply.headers.get("x-upstream") == self.route, reply.status))
        self.client.close()


class Poller(threading.Thread):
    """When did something first become true (polled every ``period``)?"""

    def __init__(self, probe: Callable[[], bool], stop: threading.Event, period: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.probe, self.stop_event, self.period = probe, stop, period
        self.at: float | None = None

    def run(self) -> None:
        while not self.stop_event.is_set() and self.at is None:
            try:
                if self.probe():
                    self.at = time.monotonic()
            except OSError:
                pass
            time.sleep(self.period)


def json_get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=2) as response:
        return json.loads(response.read())


def board_open(admin: str, route: str) -> bool:
    """The central breaker's board holds ``default/<route>`` OPEN."""
    return bool(json_get(f"{admin}/breakers/window?route=default/{route}")["phase"] == "open")


def ejected(envoy: EnvoyProcess, stat: str) -> bool:
    """Envoy's outlier detection ejected a host (``stat``: the cluster's ejections_enforced_total)."""
    return envoy.stats(filter="ejections_enforced_total$").get(stat, 0) > 0


def served(stack: GatewayStack, name: str) -> int:
    return int(json_get(f"{stack.upstreams[name].url}/admin/fail")["served"])


def run_once(workdir: Path, *, rate: float, warmup: float, failing: float, als_flush: str) -> dict[str, Any]:
    credential = secrets.token_urlsafe(24)
    workdir.mkdir(parents=True, exist_ok=True)
    secret = workdir / "tally-credential"
    secret.write_text(credential)
    names = (*CENTRAL, NATIVE_PCT, NATIVE)
    parts = Parts(progress)
    telemetry = parts.add(TelemetryServiceProcess(workdir / "telemetry", sink={"stdout": {}}))
    stack = parts.add(GatewayStack(workdir / "stack", upstreams=names, control_plane_extra={
        "accessLog": {"address": telemetry.address, "bufferSize": 16384, "flushInterval": als_flush},
        "breakers": {"tallyCredentialFile": str(secret)},
    }))
    telemetry.extra["breakerTallies"] = {"controlPlane": [stack.control_plane.admin_url], "credentialFile": str(secret)}
    routes = [
        *(route_doc(n, {"match": {"pathPrefix": f"/{n}"}, "backends": [{"service": n, "port": 8080}],
                        "circuitBreaker": {"errorRate": BREAKER}, "auth": {"required": False}}) for n in CENTRAL),
        route_doc(NATIVE, {"match": {"pathPrefix": f"/{NATIVE}"}, "backends": [{"service": NATIVE, "port": 8080}],
                           "outlierDetection": OUTLIER, "auth": {"required": False}}),
        route_doc(NATIVE_PCT, {"match": {"pathPrefix": f"/{NATIVE_PCT}"}, "backends": [{"service": NATIVE_PCT, "port": 8080}],
                               "outlierDetection": OUTLIER_PCT, "auth": {"required": False}}),
    ]
    stop = threading.Event()
    try:
        telemetry.start()
        stack.commit_routes({"r.yaml": routes})
        stack.start(wait_path=f"/{NATIVE}/x")
        assert stack.envoy is not None
        envoy = stack.envoy
        admin = stack.control_plane.admin_url
        wait_for(lambda: json_get(f"{admin}/breakers/window?route=default/central")["phase"] == "closed", 10, "rules")
        rates = {**{n: rate * share for n, share in CENTRAL.items()}, NATIVE_PCT: rate, NATIVE: rate}
        loads = {n: Load(stack.listener_port, n, r, stop) for n, r in rates.items()}
        for load in loads.values():
            load.start()
        progress(f"warm-up {warmup}s at {rates}")
        time.sleep(warmup)
        pollers: dict[str, Poller] = {n: Poller(functools.partial(board_open, admin, n), stop) for n in CENTRAL}
        for native in (NATIVE_PCT, NATIVE):
            stat = f"cluster.default_{native}_8080.outlier_detection.ejections_enforced_total"
            pollers[native] = Poller(functools.partial(ejected, envoy, stat), stop, 0.05)
        onset = time.monotonic()
        for name in names:
            urllib.request.urlopen(urllib.request.Request(f"{stack.upstreams[name].url}/admin/fail?status=503", method="POST"), timeout=2).read()
        onset_done = time.monotonic()
        for poller in pollers.values():
            poller.start()
        progress(f"upstreams failing (onset took {1000 * (onset_done - onset):.1f} ms); {failing}s")
        time.sleep(failing - 1.0)
        before = {n: served(stack, n) for n in names}
        sent_before = {n: len(loads[n].replies) for n in names}
        time.sleep(1.0)
        after = {n: served(stack, n) for n in names}
        sent_after = {n: len(loads[n].replies) for n in names}
        stop.set()
        for thread in [*loads.values(), *pollers.values()]:
            thread.join(timeout=10)
        out: dict[str, Any] = {}
        for name in names:
            replies, detected = loads[name].replies, pollers[name].at
            fallback = next((t for t, upstream, _ in replies if t >= onset_done and not upstream), None)
            sent = max(1, sent_after[name] - sent_before[name])
            out[name] = {
                "rate_rps": round(rates[name], 1),
                "detected_s": round(detected - onset, 3) if detected is not None else None,
                "first_fallback_s": round(fallback - onset, 3) if fallback is not None else None,
                "upstream_share_after": round((after[name] - before[name]) / sent, 3),
                "statuses_after_onset": sorted({s for t, _, s in replies if t >= onset_done}),
            }
        return out
    finally:
        stop.set()
        parts.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=200.0, help="requests/s on /central and /native")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--failing", type=float, default=5.0)
    parser.add_argument("--als-flush", default="200ms", help="Envoy's access-log flushInterval")
    parser.add_argument("--rounds", type=int, default=3, help="fresh gateways, one onset each; medians reported")
    add_workdir_arguments(parser)
    args = parser.parse_args(argv)
    with Run("breaker", argv, args, progress) as run:
        run.report["settings"] = {"rate_rps": args.rate, "warmup_s": args.warmup, "failing_s": args.failing, "rounds": args.rounds,
                                  "access_log_flush": args.als_flush, "breaker": BREAKER, "outlier_detection": OUTLIER_PCT}
        run.report["machine"] = describe(("grpcio", "protobuf", "aiohttp"), ("telemetry", "control_plane", "servicekit"))
        rounds = [
            run_once(run.workdir / f"round-{i}", rate=args.rate, warmup=args.warmup, failing=args.failing, als_flush=args.als_flush)
            for i in range(args.rounds)
        ]
    results = {
        name: {
            "rate_rps": rounds[0][name]["rate_rps"],
            **{key: median_of_all([r[name][key] for r in rounds]) for key in ("detected_s", "first_fallback_s", "upstream_share_after")},
        }
        for name in rounds[0]
    }
    central, native, native_pct = results["central"], results[NATIVE], results[NATIVE_PCT]
    run.print(
        baseline={"route": "central", **central},
        ratios={
            "native_pct_over_central_detected": ratio(native_pct["detected_s"], central["detected_s"], 2),
            "native_over_central_detected": ratio(native["detected_s"], central["detected_s"], 2),
            "native_over_central_first_fallback": ratio(native["first_fallback_s"], central["first_fallback_s"], 2),
            "central_50pct_dropped_over_full_detected": ratio(results["central-50"]["detected_s"], central["detected_s"], 2),
            "central_90pct_dropped_over_full_detected": ratio(results["central-90"]["detected_s"], central["detected_s"], 2),
        },
        results_median=results,
        rounds=rounds,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
