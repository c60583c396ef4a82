"""Where the wall clock stands in a rate limit's fixed window.

Fixed windows start at multiples of their length on Redis's clock (this machine's), so a
test that counts admissions must not straddle a window's end: the next window admits the
whole limit again, which is correct and looks like over-admission (CI once saw a limit of
20 admit 40 across 09:00:00 with a 1 h window)."""

from __future__ import annotations

import time

from limiter.local import wall_ms as now_ms  # the local store's clock: Redis TIME's, on one machine

__all__ = ["delay_to_offset", "delay_to_settle", "now_ms", "settle", "window_left"]


def window_left(window_ms: int) -> float:
    """Seconds until the current window ends."""
    return (window_ms - now_ms() % window_ms) / 1000


def delay_to_offset(window_ms: int, offset_ms: int) -> float:
    """Seconds until ``offset_ms`` into a window (this one if still ahead, else the next)."""
    return ((offset_ms - now_ms() % window_ms) % window_ms) / 1000


def delay_to_settle(window_ms: int, need_ms: int) -> float:
    """Seconds to wait so that at least ``need_ms`` are left in the window: 0 if they are."""
    return 0.0 if window_left(window_ms) * 1000 >= need_ms else delay_to_offset(window_ms, 20)


def settle(window_s: float, need_s: float) -> None:
    """Block until at least ``need_s`` are left in the current ``window_s`` window."""
    time.sleep(delay_to_settle(round(window_s * 1000), round(need_s * 1000)))
