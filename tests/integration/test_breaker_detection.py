"""Breaker detection through real Envoy, real telemetry (ALS) and the control plane: the
access-log stream moves the board. (What Envoy answers in each phase is the translator's
part of issue 16, tested with it.)"""

from __future__ import annotations

import json
import secrets
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.harness.gateway import GatewayStack
from tests.harness.http_client import wait_for
from tests.harness.route_repo import route_doc
from tests.harness.telemetry import TelemetryServiceProcess
from tests.integration.conftest import StackFactory

BACKEND = [{"service": "svc-a", "port": 8080}]


def breaker(**fields: Any) -> dict[str, Any]:
    rate = {"window": "30s", "minimumCalls": 20, "failureRateThreshold": 50, "waitInOpen": "2s", "halfOpenProbes": 3}
    rate.update(fields)
    return {"errorRate": rate}


def start(
    make_stack: StackFactory, tmp_path: Path, kafka_address: str, routes: list[dict[str, Any]]
) -> tuple[GatewayStack, TelemetryServiceProcess, str]:
    credential = secrets.token_urlsafe(24)
    secret = tmp_path / "tally-credential"
    secret.write_text(credential)
    # Kafka at a closed port: the drain stalls, the one-event buffer drops nearly every
    # event (back-pressure), and the breakers must see every entry all the same.
    kafka = {"bootstrapServers": [kafka_address], "requestTimeout": "1s", "retryBackoff": "200ms"}
    telemetry = TelemetryServiceProcess(tmp_path / "telemetry", sink={"kafka": kafka}, extra={"buffer": {"maxEvents": 1}})
    stack = make_stack(control_plane_extra={
        "accessLog": {"address": telemetry.address, "bufferSize": 0, "flushInterval": "50ms"},
        "breakers": {"tallyCredentialFile": str(secret)},
    })
    telemetry.extra["breakerTallies"] = {
        "controlPlane": [stack.control_plane.admin_url], "credentialFile": str(secret), "flushInterval": "200ms",
    }
    telemetry.start()
    try:
        stack.commit_routes({"r.yaml": routes})
        stack.start(wait_path="/ok")
        # Telemetry learns the breaker routes from its first tally POST the control plane
        # answers (every 200 ms, after a refused one while it was starting); entries logged
        # before that are not a breaker's calls. Traffic starts once it has them.
        expected = sum(1 for r in routes if "circuitBreaker" in r["spec"])
        assert telemetry.process is not None
        process = telemetry.process

        def has_rules() -> bool:
            lines = [line for line in process.log_tail(2000).splitlines() if '"breaker_rules"' in line]
            return any(json.loads(line).get("routes") == expected for line in lines)

        wait_for(has_rules, 10, f"telemetry has the rules of {expected} breaker routes")
    except BaseException:
        telemetry.stop()  # the test's own finally is not reached: never leave it running
        raise
    return stack, telemetry, credential


def window(stack: GatewayStack, route: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{stack.control_plane.admin_url}/breakers/window?route=default/{route}", timeout=5) as response:
        data: dict[str, Any] = json.loads(response.read())
        return data


def wait_phase(stack: GatewayStack, route: str, phase: str, timeout: float = 10.0) -> float:
    return wait_for(lambda: window(stack, route)["phase"] == phase, timeout, f"{route} {phase}")


def wait_probes_in_envoy(stack: GatewayStack, timeout: float = 5.0) -> float:
    """The board shows HALF_OPEN a few milliseconds before Envoy runs it: a probe sent in
    between gets the OPEN fallback, which never counts. Wait for Envoy's route table to hold
    the probe budget (without spending a request on finding out)."""
    envoy = stack.envoy
    assert envoy is not None
    routes = "/config_dump?resource=dynamic_route_configs"
    return wait_for(lambda: "breaker_probes_" in envoy.admin_get(routes), timeout, "the HALF_OPEN probe budget in Envoy")


def served(stack: GatewayStack) -> int:
    with urllib.request.urlopen(f"{stack.upstreams['svc-a'].url}/admin/fail", timeout=5) as response:
        count: int = json.loads(response.read())["served"]
        return count


def route(name: str, **spec: Any) -> dict[str, Any]:
    return route_doc(name, {"auth": {"required": False}, "match": {"pathPrefix": f"/{name}"}, "backends": BACKEND, **spec})


def test_error_rate_opens_after_minimum_calls_half_opens_and_probes_close_it(make_stack: StackFactory, tmp_path: Path, refused_address: str) -> None:
    stack, telemetry, _ = start(make_stack, tmp_path, refused_address, [
        route("ok"),
        route("sixty", circuitBreaker=breaker()),
        route("two", circuitBreaker=breaker()),
    ])
    try:
        # 60 % failures: 19 calls stay below minimumCalls, the 20th may open it.
        for i in range(19):
            stack.get(f"/sixty/{i}" + ("?status=503" if i % 5 < 3 else ""))
        for i in range(100):  # 2 % failures, in the same run
            stack.get(f"/two/{i}" + ("?status=500" if i % 50 == 0 else ""))
        wait_for(lambda: window(stack, "sixty")["calls"] == 19, 10, "19 calls counted")
        assert window(stack, "sixty")["phase"] == "closed", "19 calls are below minimumCalls"
        stack.get("/sixty/19")
        wait_phase(stack, "sixty", "open", timeout=5)
        state = window(stack, "sixty")
        assert state["reason"].startswith("failure rate 60% of 20 calls (threshold 50%"), state
        opened = time.monotonic()
        wait_phase(stack, "sixty", "half-open", timeout=6)
        assert time.monotonic() - opened >= 1.5, "waitInOpen is 2s"
        wait_probes_in_envoy(stack)
        for i in range(3):
            stack.get(f"/sixty/probe-{i}")
        wait_phase(stack, "sixty", "closed", timeout=5)
        assert window(stack, "sixty")["reason"] == "3 half-open probes succeeded (needed 3)"

        two = window(stack, "two")
        assert two["phase"] == "closed" and two["calls"] == 100 and two["failures"] == 2, two
        transitions = stack.control_plane.metric("gatehouse_breaker_detector_transitions_total", to="open")
        assert transitions == 1.0, "only the 60 % route opened"
        assert telemetry.metric("gatehouse_telemetry_access_dropped_total", reason="buffer_full") >= 100, (
            "the buffer of one event dropped most entries, and the breakers saw them all the same"
        )
        events = [json.loads(line) for line in stack.control_plane.log_tail(5000).splitlines() if '"breaker.transition"' in line]
        moves = [(e["subject"], e["details"]["to"]) for e in events if e.get("actor") == "detector"]
        assert moves == [("default/sixty", "open"), ("default/sixty", "half-open"), ("default/sixty", "closed")], moves
    finally:
        telemetry.stop()


def test_a_failing_probe_opens_again(make_stack: StackFactory, tmp_path: Path, refused_address: str) -> None:
    stack, telemetry, _ = start(make_stack, tmp_path, refused_address, [route("ok"), route("r", circuitBreaker=breaker(minimumCalls=5))])
    try:
        for i in range(5):
            stack.get(f"/r/{i}?status=503")
        wait_phase(stack, "r", "open", timeout=5)
        wait_phase(stack, "r", "half-open", timeout=6)
        wait_probes_in_envoy(stack)
        stack.get("/r/probe?status=503")
        wait_phase(stack, "r", "open", timeout=5)
        assert window(stack, "r")["reason"].startswith("half-open probe failed")
    finally:
        telemetry.stop()


def test_a_push_while_half_open_does_not_hand_out_the_spent_probes_again(
    make_stack: StackFactory, tmp_path: Path, refused_address: str
) -> None:
    """Envoy rebuilds a route's probe bucket, full, on every route-table push; the control
    plane sizes it at the probes its tallies have not yet seen spent."""
    routes = [route("ok"), route("r", circuitBreaker=breaker(minimumCalls=5, halfOpenProbes=3))]
    stack, telemetry, _ = start(make_stack, tmp_path, refused_address, routes)
    try:
        for i in range(5):
            stack.get(f"/r/{i}?status=503")
        wait_phase(stack, "r", "open", timeout=5)
        wait_phase(stack, "r", "half-open", timeout=6)
        wait_probes_in_envoy(stack)
        before = served(stack)
        for i in range(2):
            assert stack.get(f"/r/probe-{i}").status == 200
        assert served(stack) - before == 2
        wait_for(lambda: window(stack, "r")["calls"] == 2, 5, "the two probes counted")
        assert window(stack, "r")["phase"] == "half-open", "2 of 3 probes"

        # An unrelated push: a new route. Envoy's new route table holds r's bucket afresh.
        stack.commit_routes({"r.yaml": [*routes, route("late")]}, message="a new route")
        wait_for(lambda: stack.get("/late").status == 200, 15, "the new route served")
        before = served(stack)
        replies = [stack.get(f"/r/after-{i}?status=503") for i in range(10)]
        assert served(stack) - before == 1, "one probe was left, not three"
        denied = [r for r in replies if r.headers.get("x-gatehouse-breaker") == "half-open"]
        assert len(denied) == 9 and all(r.json()["error"]["code"] == "circuit_open" for r in denied), replies
        wait_phase(stack, "r", "open", timeout=5)
        assert window(stack, "r")["reason"].startswith("half-open probe failed")
    finally:
        telemetry.stop()


def test_slow_calls_open_a_slow_call_rule_and_not_an_error_rule(make_stack: StackFactory, tmp_path: Path, refused_address: str) -> None:
    stack, telemetry, _ = start(make_stack, tmp_path, refused_address, [
        route("ok"),
        route("slow", circuitBreaker=breaker(minimumCalls=10, slowCallDuration="100ms", slowCallRateThreshold=50)),
        route("errors", circuitBreaker=breaker(minimumCalls=10)),
    ])
    try:
        for name in ("slow", "errors"):
            for i in range(10):
                stack.get(f"/{name}/{i}?delay=0.15")
        wait_phase(stack, "slow", "open", timeout=5)
        assert window(stack, "slow")  # reachable
        wait_for(lambda: window(stack, "errors")["calls"] == 10, 5, "errors route counted")
        errors = window(stack, "errors")
        assert errors["phase"] == "closed" and errors["slow"] == 0 and errors["failures"] == 0, errors
    finally:
        telemetry.stop()


def test_a_request_retried_three_times_is_one_failure(make_stack: StackFactory, tmp_path: Path, refused_address: str) -> None:
    stack, telemetry, _ = start(make_stack, tmp_path, refused_address, [
        route("ok"),
        route("retried", retries={"attempts": 2, "retryOn": ["5xx"]}, circuitBreaker=breaker()),
    ])
    try:
        before = served(stack)
        assert stack.get("/retried/x?status=503").status == 503
        assert served(stack) - before == 3, "the try and two retries reached the upstream"
        wait_for(lambda: window(stack, "retried")["calls"] >= 1, 5, "the call counted")
        time.sleep(0.6)  # a second entry would have arrived by now
        state = window(stack, "retried")
        assert (state["calls"], state["failures"]) == (1, 1), state
    finally:
        telemetry.stop()


def test_bad_tallies_are_refused_and_unknown_routes_counted(make_stack: StackFactory, tmp_path: Path, refused_address: str) -> None:
    stack, telemetry, credential = start(make_stack, tmp_path, refused_address, [route("ok"), route("r", circuitBreaker=breaker(minimumCalls=5))])
    url = f"{stack.control_plane.admin_url}/breakers/tallies"

    def post(body: bytes, token: str) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(url, data=body, method="POST", headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return int(response.status), json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    try:
        bucket = int(time.time() * 1000) // 100 * 100
        flood = json.dumps({"tallies": [{"route": "default/r", "bucket": bucket, "calls": 50, "failures": 50, "slow": 0}]}).encode()
        status, body = post(flood, "not-the-credential-at-all")
        assert status == 401 and "not-the-credential" not in json.dumps(body)
        status, body = post(b'{"tallies": [{"route": "default/r", "bucket": 1, "calls": 2, "failures": 3, "slow": 0}]}', credential)
        assert status == 400 and body["error"] == "tallies[0].failures: must be an integer from 0 to 2", body
        assert window(stack, "r")["phase"] == "closed" and window(stack, "r")["calls"] == 0
        before = stack.control_plane.metric("gatehouse_breaker_tallies_total", outcome="unknown_route")
        status, body = post(json.dumps({"tallies": [{"route": "default/nope", "bucket": bucket, "calls": 5, "failures": 5, "slow": 0}]}).encode(), credential)
        assert status == 200 and body["unknownRoute"] == 1 and body["rules"]["default/r"]["clusters"] == ["default/svc-a:8080"]
        assert stack.control_plane.metric("gatehouse_breaker_tallies_total", outcome="unknown_route") == before + 1
        assert telemetry.metric("gatehouse_breaker_tally_flushes_total", outcome="ok") > 0
    finally:
        telemetry.stop()
