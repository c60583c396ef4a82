"""The debouncer coalesces bursts but never starves under a steady trickle."""

from __future__ import annotations

import asyncio
import time

from control_plane.debounce import Debouncer


async def _run_with(debouncer: Debouncer) -> asyncio.Task[None]:
    return asyncio.create_task(debouncer.run())


async def test_a_burst_becomes_one_rebuild_with_the_earliest_change_time() -> None:
    calls: list[float] = []

    async def rebuild(seen_at: float) -> None:
        calls.append(seen_at)

    debouncer = Debouncer(rebuild, quiet=0.05, max_delay=1.0)
    task = await _run_with(debouncer)
    first = time.monotonic()
    debouncer.poke(first)
    for _ in range(10):
        await asyncio.sleep(0.005)
        debouncer.poke()
    await asyncio.sleep(0.2)
    task.cancel()
    assert calls == [first]


async def test_a_steady_trickle_still_rebuilds_within_max_delay() -> None:
    calls: list[float] = []

    async def rebuild(seen_at: float) -> None:
        calls.append(time.monotonic())

    debouncer = Debouncer(rebuild, quiet=0.05, max_delay=0.15)
    task = await _run_with(debouncer)
    start = time.monotonic()
    while time.monotonic() - start < 0.5:
        debouncer.poke()
        await asyncio.sleep(0.01)  # always inside the quiet window
    task.cancel()
    assert len(calls) >= 2, "the trickle starved the rebuild"
    assert calls[0] - start < 0.25


async def test_changes_during_a_rebuild_cause_one_more_and_failures_do_not_stop_it() -> None:
    calls = 0
    started = asyncio.Event()
    release = asyncio.Event()

    async def rebuild(seen_at: float) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            started.set()
            await release.wait()
            raise RuntimeError("translator bug")

    debouncer = Debouncer(rebuild, quiet=0.01, max_delay=0.1)
    task = await _run_with(debouncer)
    debouncer.poke()
    await started.wait()
    debouncer.poke()
    debouncer.poke()
    release.set()
    await asyncio.sleep(0.1)
    task.cancel()
    assert calls == 2


async def test_poke_now_skips_the_quiet_period() -> None:
    calls: list[float] = []

    async def rebuild(seen_at: float) -> None:
        calls.append(time.monotonic())

    debouncer = Debouncer(rebuild, quiet=0.5, max_delay=1.0)
    task = await _run_with(debouncer)
    started = time.monotonic()
    debouncer.poke_now()
    await asyncio.sleep(0.1)
    debouncer.poke()
    await asyncio.sleep(0.7)
    task.cancel()
    assert len(calls) == 2 and calls[0] - started < 0.05, "the urgent poke at once, the plain one after quiet"
    assert calls[1] - started >= 0.55
