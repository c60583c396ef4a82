"""The benchmarks' shared library (bench/kit): the statistics every report rounds the same
way, the result schema every report must satisfy, the run scaffold's parts, the Prometheus
readings, and the py-spy summary over a hand-written raw profile."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from bench.kit import stats
from bench.kit.metrics import authz_decisions, delta, labelled_sums, metric_sum, samples
from bench.kit.profiler import summarise_profile
from bench.kit.report import FIELDS, ReportError, check_report, print_report
from bench.kit.run import Parts, Progress, Scenario, round_order
from bench.kit.wrk import wrk_command


def test_percentile_is_nearest_rank_and_always_a_measured_value() -> None:
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert stats.percentile(values, 50) == 3.0
    assert stats.percentile(values, 99) == 5.0
    assert stats.percentile(values, 1) == 1.0
    assert stats.percentile([7.0], 90) == 7.0


def test_summary_ms_turns_seconds_into_rounded_milliseconds() -> None:
    summary = stats.summary_ms([0.010, 0.020, 0.030, 0.0401234])
    assert summary == {"n": 4, "p50_ms": 20.0, "p90_ms": 40.12, "p99_ms": 40.12, "max_ms": 40.12, "min_ms": 10.0, "mean_ms": 25.03}
    assert stats.summary_ms([]) == {"n": 0}


def test_ratio_and_difference_are_unknown_without_both_figures() -> None:
    assert stats.ratio(1.0, 3.0) == 0.333
    assert stats.ratio(1.0, 3.0, 2) == 0.33
    assert stats.ratio(None, 3.0) is None
    assert stats.ratio(1.0, 0.0) is None
    assert stats.ratio(1.0, None) is None
    assert stats.difference(5.0, 1.25) == 3.75
    assert stats.difference(None, 1.0) is None


def test_median_skips_holes_and_rounds_on_request() -> None:
    assert stats.median([3.0, None, 1.0, 2.0]) == 2.0
    assert stats.median([1.0, 2.0], 1) == 1.5
    assert stats.median([1.0, 1.26], 1) == 1.1
    assert stats.median([None, None]) is None


def test_median_of_all_is_unknown_when_one_round_measured_nothing() -> None:
    assert stats.median_of_all([0.3, 0.1, 0.2]) == 0.2
    assert stats.median_of_all([0.1, 0.4]) == 0.4  # the upper median
    assert stats.median_of_all([0.1, None, 0.2]) is None


def test_median_at_reads_nested_fields_and_spread_is_relative_to_the_median() -> None:
    runs = [{"latency_ms": {"p99": 3.0}}, {"latency_ms": {"p99": 1.0}}, {"latency_ms": {}}, {"other": 1}]
    assert stats.median_at(runs, "latency_ms", "p99") == 2.0
    assert stats.spread_pct([90.0, 100.0, 110.0]) == 20.0
    assert stats.spread_pct([100.0]) is None


def full_report() -> dict[str, object]:
    return {"benchmark": "x", "command": "python -m bench.x", "settings": {}, "machine": {}, "baseline": {"rps": 1}, "ratios": {"a": 0.5}, "wall_s": 1.0}


def test_a_report_without_a_baseline_or_ratios_is_refused_by_name() -> None:
    report = full_report()
    del report["baseline"]
    del report["ratios"]
    with pytest.raises(ReportError, match=r"x: the report lacks \['baseline', 'ratios'\]"):
        check_report(report)
    report = {**full_report(), "ratios": [0.5]}
    with pytest.raises(ReportError, match=r"\['ratios'\] must be JSON objects"):
        check_report(report)


def test_print_report_writes_one_json_document(capsys: pytest.CaptureFixture[str]) -> None:
    print_report(full_report())
    printed = json.loads(capsys.readouterr().out)
    assert set(FIELDS) <= set(printed)


class Part:
    def __init__(self, name: str, stopped: list[str], fail: bool = False) -> None:
        self.name, self.stopped, self.fail = name, stopped, fail

    def stop(self) -> None:
        self.stopped.append(self.name)
        if self.fail:
            raise RuntimeError(f"{self.name} would not stop")


def test_parts_stop_in_reverse_order_and_past_a_failing_one(capsys: pytest.CaptureFixture[str]) -> None:
    stopped: list[str] = []
    parts = Parts(Progress("test"))
    parts.add(Part("redis", stopped))
    parts.add(Part("gateway", stopped, fail=True))
    parts.on_stop(lambda: stopped.append("client"), "the client")
    parts.stop()
    assert stopped == ["client", "gateway", "redis"]
    assert "stopping" in capsys.readouterr().err
    parts.stop()
    assert stopped == ["client", "gateway", "redis"]  # once only


def test_parts_still_stop_the_others_when_one_raises_a_base_exception() -> None:
    stopped: list[str] = []
    parts = Parts(Progress("test"))
    parts.add(Part("broker", stopped))
    parts.add(Part("gateway", stopped))

    def cancelled() -> None:
        stopped.append("consumer")
        raise asyncio.CancelledError

    parts.on_stop(cancelled, "the consumer")
    with pytest.raises(asyncio.CancelledError):
        parts.stop()
    assert stopped == ["consumer", "gateway", "broker"]


def test_scenario_expects_all_or_no_errors_give_or_take_a_tenth_of_a_percent() -> None:
    allow, deny = Scenario("a", "/a", "allowed"), Scenario("d", "/d", "denied", 401)
    assert allow.status_as_expected({"requests": 10_000, "status_errors": 10})
    assert not allow.status_as_expected({"requests": 10_000, "status_errors": 11})
    assert deny.status_as_expected({"requests": 10_000, "status_errors": 9_990})
    assert not deny.status_as_expected({"requests": 10_000, "status_errors": 0})
    assert round_order(["a", "b", "c"], 0) == ["a", "b", "c"]
    assert round_order(["a", "b", "c"], 1) == ["c", "b", "a"]


def test_wrk_command_puts_headers_before_the_script_and_its_arguments_last() -> None:
    argv = wrk_command("http://127.0.0.1:1/p", threads=2, connections=32, duration=10, script=Path("/w/t.lua"),
                       headers=("Authorization: Bearer x",), script_args=("/w/tokens.txt", "2"))
    assert argv == ["wrk", "-t", "2", "-c", "32", "-d", "10s", "--timeout", "5s", "--latency", "-H", "Authorization: Bearer x",
                    "-s", "/w/t.lua", "http://127.0.0.1:1/p", "--", "/w/tokens.txt", "2"]


METRICS = """\
# HELP gatehouse_authz_decisions_total Decisions.
# TYPE gatehouse_authz_decisions_total counter
gatehouse_authz_decisions_total{reason="ok",result="allow",worker="1"} 5.0
gatehouse_authz_decisions_total{reason="ok",result="allow",worker="2"} 2.0
gatehouse_authz_decisions_total{reason="expired",result="deny",worker="1"} 1.0
gatehouse_ratelimit_hits_total{limit="default/r#0",worker="1"} 7.0
gatehouse_telemetry_access_buffered 3.0
"""


def test_metrics_read_samples_decisions_and_sums_over_workers() -> None:
    assert [name for name, _, _ in samples(METRICS, "gatehouse_telemetry_")] == ["gatehouse_telemetry_access_buffered"]
    assert authz_decisions(METRICS) == {"allow/ok": 7, "deny/expired": 1}
    assert authz_decisions(METRICS, "|")["allow|ok"] == 7
    sums = labelled_sums(METRICS, {"gatehouse_authz_decisions_total"})
    assert sums == {"gatehouse_authz_decisions_total{reason=ok,result=allow}": 7.0,
                    "gatehouse_authz_decisions_total{reason=expired,result=deny}": 1.0}
    assert metric_sum(sums, "gatehouse_authz_decisions_total") == 8.0
    assert metric_sum(sums, "gatehouse_authz_decisions_total", result="deny") == 1.0
    assert delta({"a": 1, "b": 2}, {"b": 2, "a": 4, "c": 1.23456}, 2) == {"a": 3, "c": 1.23}


RAW = """\
process 1:python;thread (0x1): MainThread;_run_once (/x/lib/python3.11/asyncio/base_events.py:1);Check (/repo/ext_authz/service.py:10);decode (/x/site-packages/jwt/api_jws.py:5) 6
process 1:python;thread (0x1): MainThread;_run_once (/x/lib/python3.11/asyncio/base_events.py:1);epoll_wait (libc.so.6) 3
process 1:python;thread (0x2): poller;run (/x/site-packages/grpc/_cython/x.py:2);take_gil (libpython.so) 1
"""


def test_profile_summary_counts_running_samples_by_category_and_handler(tmp_path: Path) -> None:
    raw = tmp_path / "raw.txt"
    raw.write_text(RAW)
    categories = [("jwt_crypto", ("jwt/",)), ("asyncio", ("asyncio/",))]
    summary = summarise_profile(raw, categories, ("inside_Check", "Check ("))
    assert summary["samples_by_state"] == {"running": 6, "idle": 3, "gil_wait": 1}
    assert summary["running_samples"] == 6
    assert summary["categories"] == [{"name": "jwt_crypto", "share": 1.0, "samples": 6}]
    assert summary["inside_Check"]["share"] == 1.0
    every = summarise_profile(raw, categories, None, running_only=False, gil_waits=False)
    assert every["running_samples"] == 10
    assert {c["name"] for c in every["categories"]} == {"jwt_crypto", "asyncio", "other"}
