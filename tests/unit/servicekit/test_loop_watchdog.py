"""The loop watchdog on a real asyncio loop in this process: what counts as a stall."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest

from servicekit import loop_watchdog
from servicekit.loop_watchdog import DEFAULT_THRESHOLD, LoopWatchdog, WatchdogSettingError, from_environment, threshold_from


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        ({"CI": "true"}, DEFAULT_THRESHOLD),
        ({"CI": "true", "GATEHOUSE_LOOP_WATCHDOG": "off"}, None),
        ({"GATEHOUSE_LOOP_WATCHDOG": "on"}, DEFAULT_THRESHOLD),
        ({"GATEHOUSE_LOOP_WATCHDOG": "250ms"}, 0.25),
        ({"GATEHOUSE_LOOP_WATCHDOG": "2s"}, 2.0),
    ],
)
def test_the_setting(environ: dict[str, str], expected: float | None) -> None:
    assert threshold_from(environ) == expected


@pytest.mark.parametrize(("value", "reason"), [("soon", "expected off, on, or a threshold"), ("10ms", "at least 40ms")])
def test_a_bad_setting_names_itself_and_the_reason(value: str, reason: str) -> None:
    with pytest.raises(WatchdogSettingError, match=reason) as caught:
        from_environment("svc", {"GATEHOUSE_LOOP_WATCHDOG": value})
    assert "GATEHOUSE_LOOP_WATCHDOG" in str(caught.value) and value in str(caught.value)


async def watched(body: object, tmp_path: Path) -> LoopWatchdog:
    watchdog = LoopWatchdog(service="svc", threshold=0.1, report_dir=tmp_path)
    watchdog.start()
    try:
        await asyncio.sleep(0.05)
        await body  # type: ignore[misc]
        await asyncio.sleep(0.1)  # the next beat closes the stall; the monitor reports it
    finally:
        watchdog.stop()
    return watchdog


def blocking_handler() -> None:
    time.sleep(0.25)


async def test_a_blocking_callback_is_reported_with_its_stack(tmp_path: Path) -> None:
    async def body() -> None:
        asyncio.get_running_loop().call_soon(blocking_handler)
        await asyncio.sleep(0)

    watchdog = await watched(body(), tmp_path)
    [stall] = watchdog.stalls
    assert 0.2 <= stall.held < 1.0
    assert "time.sleep(0.25)" in stall.culprit() and any("blocking_handler" in frame for frame in stall.stack)
    [record] = [json.loads(line) for line in (tmp_path / f"svc-{os.getpid()}.jsonl").read_text().splitlines()]
    assert record["service"] == "svc" and record["held_ms"] >= 200


async def test_a_callback_that_keeps_the_gil_is_still_reported(tmp_path: Path) -> None:
    def spin() -> None:
        deadline = time.thread_time() + 0.3  # CPU time: on a loaded machine, wall time is more
        while time.thread_time() < deadline:
            sum(range(100_000))

    async def body() -> None:
        asyncio.get_running_loop().call_soon(spin)
        await asyncio.sleep(0)

    watchdog = await watched(body(), tmp_path)
    assert len(watchdog.stalls) == 1 and watchdog.stalls[0].held >= 0.2


async def test_an_idle_loop_and_short_callbacks_are_not_stalls(tmp_path: Path) -> None:
    async def body() -> None:
        await asyncio.sleep(0.35)  # idle: the loop waits in its selector
        for _ in range(50):
            time.sleep(0.002)  # 2 ms each, yielding between them: busy, never held
            await asyncio.sleep(0)

    watchdog = await watched(body(), tmp_path)
    assert watchdog.stalls == []
    assert not list(tmp_path.glob("*.jsonl"))


def test_steal_is_read_per_cpu_and_the_most_any_cpu_lost_counts(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text(
        "cpu  900 0 100 5000 10 0 5 300 0 0\n"
        "cpu0 400 0 50 2500 5 0 2 100 0 0\n"
        "cpu1 500 0 50 2500 5 0 3 200 0 0\n"
        "intr 12345\n"
    )
    ticks = loop_watchdog._CLOCK_TICKS
    before = loop_watchdog._steal(str(stat))
    assert before == {"cpu0": 100 / ticks, "cpu1": 200 / ticks}
    after = {"cpu0": before["cpu0"] + 0.03, "cpu1": before["cpu1"] + 0.12}
    assert loop_watchdog._most_stolen(before, after) == pytest.approx(0.12)
    assert loop_watchdog._most_stolen(None, after) == 0.0
    assert loop_watchdog._steal(str(tmp_path / "missing")) is None


async def test_time_the_hypervisor_stole_is_not_a_stall(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 250 ms block during which the CPUs lost 200 ms to steal held the loop 50 ms:
    under the threshold. The same block without steal is reported (the test above)."""
    stolen = {"cpu0": 0.0}
    monkeypatch.setattr(loop_watchdog, "_steal", lambda path="/proc/stat": dict(stolen))

    def blocked_while_stolen() -> None:
        time.sleep(0.05)  # past the monitor's last healthy reading
        stolen["cpu0"] = 0.2
        time.sleep(0.2)

    async def body() -> None:
        asyncio.get_running_loop().call_soon(blocked_while_stolen)
        await asyncio.sleep(0)

    watchdog = await watched(body(), tmp_path)
    assert watchdog.stalls == []
