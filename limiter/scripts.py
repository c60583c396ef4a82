"""The Lua scripts, assembled from ``lua/``: ``common.lua`` + an algorithm + an operation.

``hit`` is exact mode (``refund`` un-counts a hit another limit of the request denied); ``reserve`` and ``release`` are hybrid mode, and run the same
algorithm code on the same counter, so both modes always agree on the counts. ``waiting_room.lua`` stands alone (a route's queue,
``limiter/waiting_room_store.py``).
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Final, Literal

from .model import ALGORITHMS, Algorithm

Op = Literal["hit", "refund", "reserve", "release"]
OPS: Final[tuple[Op, ...]] = ("hit", "refund", "reserve", "release")

_ALGORITHM_FILES: Final[dict[Algorithm, str]] = {
    "slidingWindow": "sliding_window.lua",
    "tokenBucket": "token_bucket.lua",
    "fixedWindow": "fixed_window.lua",
}


def _read(name: str) -> str:
    return resources.files("limiter").joinpath("lua", name).read_text(encoding="utf-8")


@cache
def source(algorithm: Algorithm, op: Op) -> str:
    """The full text of one script, as sent to Redis."""
    return "\n".join((_read("common.lua"), _read(_ALGORITHM_FILES[algorithm]), _read(f"{op}.lua")))


def waiting_room_source() -> str:
    """The waiting room's one script (``waiting_room.lua``, standalone: no algorithm)."""
    return _read("waiting_room.lua")


def all_sources() -> dict[tuple[Algorithm, Op], str]:
    return {(algorithm, op): source(algorithm, op) for algorithm in ALGORITHMS for op in OPS}
