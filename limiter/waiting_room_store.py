"""A route's waiting room in Redis: one atomic script per step (``lua/waiting_room.lua``).

::

    gatehouse:wr:{<route id>}:q      zset  ticket id -> arrival number (waiting)
    gatehouse:wr:{<route id>}:ready  zset  ticket id -> its turn passes on at (its turn came)
    gatehouse:wr:{<route id>}:exp    zset  ticket id -> last seen + ttl (every live ticket)
    gatehouse:wr:{<route id>}:st     hash  turns, ts, seq
    gatehouse:wr:{<route id>}:spent  zset  ticket id -> forget at (admitted tickets)
    gatehouse:wr:{<route id>}:due    hash  ticket id -> when its client was told to come back
    gatehouse:wr:{<route id>}:missed zset  ticket id -> missed at (its turn passed on)

One hash tag per route, so a room lives on one Redis Cluster node; the clock is Redis
``TIME``. The client, its timeouts and the circuit breaker are the rate limiter's
(``limiter.redis_store.RedisStore``): one connection pool, one view of Redis's health.
redis-py's ``register_script`` reloads the script on ``NOSCRIPT``. A step that fails
raises a ``StoreError``; the caller applies the room's ``onStoreFailure``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from .keys import escape
from .redis_store import RedisStore
from .scripts import waiting_room_source

PREFIX: Final = "gatehouse:wr:"
ADMITTED, WAIT, FULL, USED = 1, 0, 2, 3
TURN_GRACE_MS: Final = 1000
"""A ready ticket whose client has not come back by its Retry-After plus this has missed its
turn: the turn passes to the next ticket (a client keeping to Retry-After is back well
within it; one that comes back later takes the next turn)."""

Keys = tuple[str, str, str, str, str, str, str]


@dataclass(frozen=True, slots=True)
class Room:
    """A route's room as the step needs it."""

    route: str
    admit_per_second: int
    max_waiting: int
    ticket_ttl_ms: int


@dataclass(frozen=True, slots=True)
class Step:
    code: int
    """ADMITTED, WAIT, FULL or USED."""
    position: int
    """With WAIT: 1 + the tickets ahead."""
    retry_after: int = 0
    """With WAIT: the seconds the client was told to wait (the script holds its turn that long
    plus ``TURN_GRACE_MS``)."""


def room_keys(route: str, prefix: str = PREFIX) -> Keys:
    tag = prefix + "{" + escape(route) + "}:"
    return (tag + "q", tag + "ready", tag + "exp", tag + "st", tag + "spent", tag + "due", tag + "missed")


class WaitingRoomStore:
    def __init__(self, redis: RedisStore, *, prefix: str = PREFIX) -> None:
        self._redis = redis
        self._prefix = prefix
        self._script = redis.client.register_script(waiting_room_source())
        self._keys: dict[str, Keys] = {}

    async def step(self, room: Room, ticket_id: str, *, returning: bool) -> Step:
        """Arrive (``returning=False``, ``ticket_id`` fresh) or come back with a ticket."""
        keys = self._keys.get(room.route)
        if keys is None:
            if len(self._keys) > 10_000:
                self._keys.clear()
            keys = self._keys[room.route] = room_keys(room.route, self._prefix)
        args = (room.admit_per_second, room.max_waiting, room.ticket_ttl_ms, ticket_id, 1 if returning else 0, TURN_GRACE_MS)
        reply = await self._redis.call(self._script, keys, args)
        return Step(int(reply[0]), int(reply[1]), int(reply[2]))
