"""The Redis key layout for rate-limit counters (pure: names only).

::

    gatehouse:rl:{<limit id>|<key>}:sw:<window_ms>       sliding window  hash w, c, p
    gatehouse:rl:{<limit id>|<key>}:fw:<window_ms>       fixed window    hash w, c
    gatehouse:rl:{<limit id>|<key>}:tb:<window_ms>       token bucket    hash c, ts
    gatehouse:rl:{<limit id>|<key>}:res:<alg>:<window_ms>  hybrid reservation records:
                                                         field <instance id> = "<tag>:<tokens>"
                                                         (reserved in window/epoch <tag>, not given back)

Everything between the braces is the Redis Cluster hash tag, so all keys of one limit and
key live in one slot. ``%``, ``|``, ``{`` and ``}`` in the limit id or key are
percent-encoded: the tag is never cut short and ``("a|b", "c")`` never meets
``("a", "b|c")``. The window length is part of the name, so changing it starts new
counters instead of misreading old ones (changing the limit or capacity keeps them).
"""

from __future__ import annotations

from typing import Final

from .model import Algorithm, LimitSpec

DEFAULT_PREFIX: Final = "gatehouse:rl:"

_SHORT: Final[dict[Algorithm, str]] = {"slidingWindow": "sw", "fixedWindow": "fw", "tokenBucket": "tb"}
_ESCAPES: Final = str.maketrans({"%": "%25", "|": "%7C", "{": "%7B", "}": "%7D"})


def escape(part: str) -> str:
    return part.translate(_ESCAPES)


def hash_tag(spec: LimitSpec, key: str) -> str:
    return "{" + escape(spec.id) + "|" + escape(key) + "}"


def counter_key(spec: LimitSpec, key: str, prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix}{hash_tag(spec, key)}:{_SHORT[spec.algorithm]}:{spec.window_ms}"


def reservation_key(spec: LimitSpec, key: str, prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix}{hash_tag(spec, key)}:res:{_SHORT[spec.algorithm]}:{spec.window_ms}"
