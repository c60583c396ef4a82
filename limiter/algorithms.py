"""The three algorithms as pure integer maths on a counter's stored state (no I/O, no clock).

The Lua scripts in ``lua/`` implement exactly these functions, line for line, on a Redis
hash; the local limiter runs these directly. Times are integer milliseconds.

Stored state (one Redis hash per limit and key):

- fixed window:   ``w`` window index (``now // window_ms``), ``c`` hits admitted in it;
- sliding window: ``w``, ``c`` and ``p``: hits admitted in window ``w - 1``;
- token bucket:   ``c`` tokens left, ``ts`` the time of the last refill step (the bucket
  gains ``refill_tokens`` every ``window_ms`` after ``ts``; a full bucket's clock restarts
  when it is first drawn from).

Only admitted hits and reservations are written: a denied hit changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import LimitSpec


@dataclass(frozen=True, slots=True)
class Stored:
    """What a counter's Redis hash holds (absent hash: ``None``)."""

    window: int = 0
    current: int = 0
    previous: int = 0
    stamp: int = 0


@dataclass(frozen=True, slots=True)
class View:
    """A counter as of ``now``: windows rolled forward, bucket refilled.

    ``index`` is the window index, or the token bucket's refill epoch (``now // window_ms``);
    hybrid reservations are tagged with it and lapse when it ends.
    """

    now: int
    index: int
    elapsed: int
    current: int
    previous: int = 0
    stamp: int = 0


@dataclass(frozen=True, slots=True)
class Outcome:
    """``after_ms``: if allowed, ms until the quota resets; if denied, ms until ``cost`` could
    pass (``-1``: never, the cost exceeds the limit)."""

    allowed: bool
    remaining: int
    after_ms: int


@dataclass(frozen=True, slots=True)
class Grant:
    """A reservation's result: ``granted`` tokens (0: denied) and what the exact script reports."""

    granted: int
    remaining: int
    after_ms: int
    tag: int
    tag_left_ms: int


def observe(spec: LimitSpec, stored: Stored | None, now: int) -> View:
    """Read ``stored`` as of ``now``."""
    w = spec.window_ms
    if spec.algorithm == "tokenBucket":
        epoch = now // w
        if stored is None:
            tokens, stamp = spec.limit, now
        else:
            steps = max(0, (now - stored.stamp) // w)
            tokens = min(spec.limit, stored.current + steps * spec.refill_tokens)
            stamp = now if tokens == spec.limit else stored.stamp + steps * w
        return View(now, epoch, now - epoch * w, tokens, 0, stamp)
    index = now // w
    current = previous = 0
    if stored is not None:
        if stored.window > index:  # Redis's clock went back: keep counting in the stored window
            index = stored.window
        if stored.window == index:
            current, previous = stored.current, stored.previous
        elif stored.window == index - 1:
            previous = stored.current
    if spec.algorithm == "fixedWindow":
        previous = 0
    return View(now, index, max(0, now - index * w), current, previous)


def available(spec: LimitSpec, view: View) -> int:
    """Unit hits that would pass now."""
    if spec.algorithm == "slidingWindow":
        w = spec.window_ms
        room = spec.limit * w - view.previous * (w - view.elapsed) - view.current * w
        return room // w if room > 0 else 0
    if spec.algorithm == "fixedWindow":
        return max(0, spec.limit - view.current)
    return view.current


def take(spec: LimitSpec, view: View, n: int) -> tuple[View, Stored, int]:
    """Count ``n`` hits: the new view, what to store, and the key's TTL in ms."""
    after = View(view.now, view.index, view.elapsed, _taken(spec, view, n), view.previous, view.stamp)
    return after, _stored(spec, after), _ttl_ms(spec, after)


def give_back(spec: LimitSpec, view: View, n: int) -> tuple[View, Stored | None, int]:
    """Un-count ``n`` reserved tokens of this window/epoch; ``None``: delete (a full bucket)."""
    after = View(view.now, view.index, view.elapsed, _taken(spec, view, -n), view.previous, view.stamp)
    if spec.algorithm == "tokenBucket" and after.current >= spec.limit:
        return after, None, 0
    return after, _stored(spec, after), _ttl_ms(spec, after)


def _taken(spec: LimitSpec, view: View, n: int) -> int:
    if spec.algorithm == "tokenBucket":
        return min(spec.limit, view.current - n)
    return max(0, view.current + n)


def _stored(spec: LimitSpec, view: View) -> Stored:
    if spec.algorithm == "tokenBucket":
        return Stored(current=view.current, stamp=view.stamp)
    return Stored(view.index, view.current, view.previous)


def _ttl_ms(spec: LimitSpec, view: View) -> int:
    """Fixed: to the window's end. Sliding: to the end of the next window (it is read as
    ``p`` there). Token bucket: until it would be full again (absent means full)."""
    w = spec.window_ms
    if spec.algorithm == "fixedWindow":
        return w - view.elapsed
    if spec.algorithm == "slidingWindow":
        return 2 * w - view.elapsed
    return max(1, reset_ms(spec, view))


def reset_ms(spec: LimitSpec, view: View) -> int:
    """Ms until the quota is restored: the window's end, or until the bucket is full."""
    if spec.algorithm != "tokenBucket":
        return spec.window_ms - view.elapsed
    missing = spec.limit - view.current
    if missing <= 0:
        return 0
    steps = -(-missing // spec.refill_tokens)
    return view.stamp + steps * spec.window_ms - view.now


def wait_ms(spec: LimitSpec, view: View, need: int) -> int:
    """Ms until ``need`` unit hits could pass if nobody else hits; 0: now; -1: never."""
    if need > spec.limit:
        return -1
    if available(spec, view) >= need:
        return 0
    w = spec.window_ms
    if spec.algorithm == "fixedWindow":
        return w - view.elapsed
    if spec.algorithm == "tokenBucket":
        steps = -(-(need - view.current) // spec.refill_tokens)
        return view.stamp + steps * w - view.now
    c, p = view.current, view.previous
    if c + need <= spec.limit:  # later in this window, as the previous window's weight fades
        at = w - ((spec.limit - c - need) * w) // p
        if at <= w - 1:
            return at - view.elapsed
    # next window: this one's hits become the previous window's
    at = 0 if c == 0 else max(0, w - ((spec.limit - need) * w) // c)
    return (w - view.elapsed) + at


def tag_left_ms(spec: LimitSpec, view: View) -> int:
    """Ms until the window or refill epoch ``view.index`` ends (when reservations lapse)."""
    return (view.index + 1) * spec.window_ms - view.now


def hit(spec: LimitSpec, view: View, cost: int) -> tuple[Outcome, tuple[Stored, int] | None]:
    """One exact hit: the outcome and, if admitted, what to store and its TTL."""
    free = available(spec, view)
    if cost > free:
        return Outcome(False, free, wait_ms(spec, view, cost)), None
    after, stored, ttl = take(spec, view, cost)
    return Outcome(True, free - cost, reset_ms(spec, after)), (stored, ttl)


def batch_size(free: int, need: int, max_batch: int, divisor: int) -> int:
    """Tokens to reserve: ``free ÷ divisor`` capped at ``max_batch``, at least ``need``, at most
    ``free``. The share shrinks as the global remainder approaches zero."""
    return min(free, max(need, min(max_batch, free // divisor)))


def reserve(
    spec: LimitSpec, view: View, need: int, max_batch: int, divisor: int
) -> tuple[Grant, tuple[Stored, int] | None]:
    """Take a batch (at least ``need``) from the counter, or nothing if ``need`` doesn't fit."""
    free = available(spec, view)
    left = tag_left_ms(spec, view)
    if need > free:
        return Grant(0, free, wait_ms(spec, view, need), view.index, left), None
    granted = batch_size(free, need, max_batch, divisor)
    after, stored, ttl = take(spec, view, granted)
    return Grant(granted, free - granted, reset_ms(spec, after), view.index, left), (stored, ttl)
