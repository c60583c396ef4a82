"""The verdict lines of `gatehouse dev` (gatehouse/devstack/steps.py), its ports and its stop signals."""

from __future__ import annotations

import io
import re
import signal
import subprocess

import pytest

from gatehouse.commands.dev import Stop, StopSignals
from gatehouse.devstack import stack
from gatehouse.devstack.steps import StepError, StepFailed, Steps


def _steps() -> tuple[Steps, io.StringIO, io.StringIO]:
    out, details = io.StringIO(), io.StringIO()
    return Steps(out=out, details=details), out, details


def test_passing_steps_print_ok_with_their_time() -> None:
    steps, out, details = _steps()
    with steps.step("redis up on 127.0.0.1:1"):
        pass
    steps.check("GET / -> 200", lambda: None)
    lines = out.getvalue().splitlines()
    assert [re.sub(r"\(\d+\.\d s\)$", "(T)", line) for line in lines] == ["ok   redis up on 127.0.0.1:1 (T)", "ok   GET / -> 200 (T)"]
    assert steps.passed == ["redis up on 127.0.0.1:1", "GET / -> 200"]
    assert details.getvalue() == ""


def test_a_failed_check_prints_one_fail_line_and_raises() -> None:
    steps, out, _ = _steps()
    with pytest.raises(StepFailed) as failed:
        steps.check("GET /nowhere -> 404", lambda: "expected 404, got 200")
    assert failed.value.step == "GET /nowhere -> 404"
    assert failed.value.reason == "expected 404, got 200"
    assert out.getvalue() == "FAIL GET /nowhere -> 404: expected 404, got 200\n"
    assert steps.passed == []


def test_a_multiline_reason_keeps_the_verdict_on_one_line() -> None:
    """wait_until's TimeoutError carries the service's log tail: it goes to the details stream."""
    steps, out, details = _steps()
    with pytest.raises(StepFailed), steps.step("envoy serving"):
        raise TimeoutError("envoy (pid 1) exited before Envoy serving; log envoy.log:\nline one\nline two")
    assert out.getvalue() == "FAIL envoy serving: envoy (pid 1) exited before Envoy serving; log envoy.log:\n"
    assert details.getvalue() == "     line one\n     line two\n"


@pytest.mark.parametrize(
    "error",
    [StepError("redis-server not found"), OSError("No such file"), subprocess.CalledProcessError(1, ["git", "commit"])],
    ids=["step-error", "os-error", "subprocess"],
)
def test_step_errors_become_failures(error: Exception) -> None:
    steps, out, _ = _steps()
    with pytest.raises(StepFailed), steps.step("s"):
        raise error
    assert out.getvalue().startswith("FAIL s: ")


def test_a_bug_is_not_reported_as_a_failed_step() -> None:
    steps, out, _ = _steps()
    with pytest.raises(KeyError), steps.step("s"):
        raise KeyError("bug")
    assert out.getvalue() == ""


def test_steps_after_a_failure_do_not_run() -> None:
    """The caller's sequence stops at the first StepFailed: here, the third step never runs."""
    steps, out, _ = _steps()
    ran: list[str] = []

    def sequence() -> None:
        steps.check("one", lambda: ran.append("one") or None)
        steps.check("two", lambda: ran.append("two") or "broken")
        steps.check("three", lambda: ran.append("three") or None)

    with pytest.raises(StepFailed):
        sequence()
    assert ran == ["one", "two"]
    assert [line.split(" (")[0] for line in out.getvalue().splitlines()] == ["ok   one", "FAIL two: broken"]


def test_dev_ports_are_distinct_even_when_free_port_repeats_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """free_port() releases each port before the next call, so the kernel may hand one out twice
    (seen: ext_authz and telemetry on one port). Repeats are drawn again until all differ."""
    redrawn = iter([8080, 5, 30, 31, 31, 32, 33])
    monkeypatch.setattr(stack, "free_port", lambda: next(redrawn))
    ports = stack.Ports(
        listener=8080, xds=5, admin=5, envoy_admin=6, redis=7, ext_authz=8, ext_authz_http=9, ext_authz_admin=10,
        ext_authz_metrics=11, ratelimit=12, ratelimit_metrics=13, telemetry=8, telemetry_metrics=14,
        upstreams={"order-service": 8080, "order-service-v3": 15},
    )
    numbers = [ports.listener, ports.xds, ports.admin, ports.envoy_admin, ports.redis, ports.ext_authz, ports.ext_authz_http,
               ports.ext_authz_admin, ports.ext_authz_metrics, ports.ratelimit, ports.ratelimit_metrics, ports.telemetry,
               ports.telemetry_metrics, *ports.upstreams.values()]
    assert len(numbers) == len(set(numbers)) == 15
    assert (ports.listener, ports.xds, ports.ext_authz) == (8080, 5, 8)  # the first holder keeps its port
    assert ports.admin == 30 and ports.telemetry == 31 and ports.upstreams["order-service"] == 32


def test_a_stop_signal_waits_for_a_held_block_then_unwinds() -> None:
    """dev's handler: SIGINT/SIGTERM raise Stop at once, or, while a process is being put on
    the stop list, as soon as that block ends (so stop() never misses a started process)."""
    stops = StopSignals()
    with pytest.raises(Stop, match="SIGINT"):
        stops._handle(signal.SIGINT, None)
    reached = []
    with pytest.raises(Stop, match="SIGTERM"), stops.held():
        with stops.held():
            stops._handle(signal.SIGTERM, None)
            reached.append("inner")
        reached.append("outer")
    assert reached == ["inner", "outer"], "the whole outermost block ran"
    with stops.held():
        pass  # nothing pending any more
