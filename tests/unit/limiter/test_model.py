"""LimitSpec validation, the local share, and the package's public API."""

from __future__ import annotations

import dataclasses

import pytest

import limiter
from limiter.model import Decision, LimitSpec, LimitSpecError, local_share

from tests.unit.limiter.specs import spec


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"id": ""}, "id"),
        ({"algorithm": "leakyBucket"}, "algorithm"),
        ({"limit": 0}, "limit"),
        ({"limit": True}, "limit"),
        ({"window_ms": 0}, "window_ms"),
        ({"limit": 10**9, "window_ms": 10**7}, "limit"),
        ({"refill_tokens": 3}, "refill_tokens"),
        ({"mode": "batched"}, "mode"),
        ({"on_store_failure": "retry"}, "on_store_failure"),
    ],
)
def test_bad_specs_name_the_limit_and_the_field(changes: dict[str, object], field: str) -> None:
    base = {"id": "shop/orders#0", "algorithm": "fixedWindow", "limit": 10, "window_ms": 1000}
    with pytest.raises(LimitSpecError) as caught:
        LimitSpec(**{**base, **changes})  # type: ignore[arg-type]
    assert f": {field}:" in str(caught.value)
    if changes.get("id") != "":
        assert "'shop/orders#0'" in str(caught.value)


def test_token_bucket_needs_a_refill() -> None:
    with pytest.raises(LimitSpecError, match="refill_tokens"):
        LimitSpec(id="a", algorithm="tokenBucket", limit=5, window_ms=1000, refill_tokens=0)
    LimitSpec(id="a", algorithm="tokenBucket", limit=5, window_ms=1000, refill_tokens=9)  # clamped by capacity


def test_specs_and_decisions_are_values() -> None:
    a = spec("fixedWindow", id="x")
    assert a == dataclasses.replace(a) and hash(a) == hash(dataclasses.replace(a))
    d = Decision(True, 10, 9, 1.5, "redis")
    assert d.shadow_denied is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.allowed = False  # type: ignore[misc]


def test_local_share_divides_the_limit_rounding_up() -> None:
    assert local_share(spec("fixedWindow", 100), 4).limit == 25
    assert local_share(spec("slidingWindow", 10), 4).limit == 3
    assert local_share(spec("fixedWindow", 3), 8).limit == 1
    one = spec("fixedWindow", 7)
    assert local_share(one, 1) is one


def test_local_share_of_a_token_bucket_divides_its_rate() -> None:
    bucket = spec("tokenBucket", 100, 1000, refill=10)  # 10 per second
    shared = local_share(bucket, 4)
    assert shared.limit == 25
    assert shared.refill_tokens / shared.window_ms * 1000 == pytest.approx(2.5)
    small = local_share(spec("tokenBucket", 5, 10_000, refill=1), 4)
    assert (small.limit, small.refill_tokens, small.window_ms) == (2, 1, 40_000)


def test_public_api_is_sorted_and_importable() -> None:
    assert limiter.__all__ == sorted(limiter.__all__)
    for name in limiter.__all__:
        assert getattr(limiter, name) is not None
