"""Every to_thread thread exists before the loop runs, so handing work over starts none."""

from __future__ import annotations

import asyncio
import threading

from servicekit.started_executor import default_size, started_executor


def test_every_thread_is_started_and_idle() -> None:
    before = {t.ident for t in threading.enumerate()}
    executor = started_executor(4, name="warm")
    try:
        started = [t for t in threading.enumerate() if t.ident not in before]
        assert len(started) == 4 and all(t.name.startswith("warm") for t in started)
        assert executor.submit(lambda: 7).result(timeout=5) == 7
    finally:
        executor.shutdown()


def test_to_thread_on_the_loop_starts_no_thread() -> None:
    """Even with every thread busy at once: the pool is full, so none is added."""
    executor = started_executor(3)

    async def main() -> int:
        asyncio.get_running_loop().set_default_executor(executor)
        count = threading.active_count()
        gate = threading.Barrier(3)
        await asyncio.gather(*(asyncio.to_thread(gate.wait, 5) for _ in range(3)))
        await asyncio.gather(*(asyncio.to_thread(sum, range(10)) for _ in range(20)))
        return threading.active_count() - count

    assert asyncio.run(main()) == 0


def test_the_default_size_is_asyncios() -> None:
    assert 5 <= default_size() <= 32
