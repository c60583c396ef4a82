"""LimitSpec builders shared by the rate-limit unit tests."""

from __future__ import annotations

from itertools import count

from limiter.model import Algorithm, LimitSpec, Mode, StoreFailure

_ids = count()


def spec(
    algorithm: Algorithm = "fixedWindow",
    limit: int = 10,
    window_ms: int = 1000,
    refill: int | None = None,
    *,
    mode: Mode = "exact",
    on_store_failure: StoreFailure = "local",
    shadow: bool = False,
    id: str | None = None,
) -> LimitSpec:
    """A spec with a fresh id; a token bucket refills 1 per window unless ``refill`` says."""
    refill_tokens = (refill or 1) if algorithm == "tokenBucket" else 0
    return LimitSpec(
        id=id or f"unit/{algorithm}#{next(_ids)}",
        algorithm=algorithm,
        limit=limit,
        window_ms=window_ms,
        refill_tokens=refill_tokens,
        shadow=shadow,
        mode=mode,
        on_store_failure=on_store_failure,
    )


class FakeClock:
    """One clock for a whole test: ``ms()`` for wall-clock stores, ``seconds()`` for monotonic ones."""

    def __init__(self, start_ms: int = 1_000_000 * 60_000) -> None:
        self.now_ms = start_ms

    def ms(self) -> int:
        return self.now_ms

    def seconds(self) -> float:
        return self.now_ms / 1000

    def advance(self, ms: int) -> None:
        self.now_ms += ms

    def set(self, ms: int) -> None:
        self.now_ms = ms
