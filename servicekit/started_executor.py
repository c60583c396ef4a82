"""A thread pool whose threads all exist before the event loop runs.

``asyncio.to_thread`` hands work to the loop's default executor, which starts a thread on
the first calls that find none idle. ``Thread.start()`` then blocks the caller, the loop
thread, until the new thread has been scheduled and has run its first lines: on a loaded
machine 100-300 ms, during which no request is served (the loop watchdog caught it). With
every thread started beforehand, handing work over never waits for a thread to start.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

START_TIMEOUT = 30.0


def default_size() -> int:
    """What asyncio's own default executor allows: ``min(32, CPUs + 4)``."""
    return min(32, (os.cpu_count() or 1) + 4)


def started_executor(size: int | None = None, *, name: str = "asyncio") -> ThreadPoolExecutor:
    """A ThreadPoolExecutor with all ``size`` threads running and idle.

    Each warm-up task waits at a barrier until every thread holds one, so the pool cannot
    reuse an idle thread and must start all ``size``.
    """
    size = size or default_size()
    executor = ThreadPoolExecutor(max_workers=size, thread_name_prefix=name)
    barrier = threading.Barrier(size)
    warm = [executor.submit(barrier.wait, START_TIMEOUT) for _ in range(size)]
    for future in warm:
        future.result(timeout=START_TIMEOUT)
    return executor
