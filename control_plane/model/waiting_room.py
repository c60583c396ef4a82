"""A route's waiting room: requests beyond ``admitPerSecond`` queue, in arrival order,
with a signed ticket, instead of being refused (docs/waiting-room.md).

Pure model: the queue itself lives in Redis (``limiter/lua/waiting_room.lua``), the
decision in ext_authz's HTTP check (``ext_authz/check/waiting_room.py``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from servicekit.durations import Duration, Millis
from servicekit.model import Model
from control_plane.model.declared_rules import DurationWithin, enforce
from control_plane.model.shared_types import cel

MAX_ADMIT_PER_SECOND = 100_000
MAX_WAITING = 1_000_000
TICKET_TTL_MIN_MS = 5_000
"""A client told to retry in 1 s must have a few seconds to come back."""
TICKET_TTL_MAX_MS = 3_600_000
DEFAULT_TICKET_TTL_MS = 60_000
_TICKET_TTL = DurationWithin("ticketTtl", TICKET_TTL_MIN_MS, TICKET_TTL_MAX_MS)


class WaitingRoom(Model):
    """``admitPerSecond`` requests a second pass; the excess waits in a queue of at most
    ``maxWaiting`` tickets, each kept while its client comes back within ``ticketTtl``.
    ``onStoreFailure`` is what happens while Redis cannot answer: ``local`` admits
    ``admitPerSecond ÷ expected instances`` per instance (no queue), ``open`` admits
    everyone, ``closed`` answers 503."""

    model_config = cel(_TICKET_TTL)

    admit_per_second: Annotated[int, Field(ge=1, le=MAX_ADMIT_PER_SECOND)]
    max_waiting: Annotated[int, Field(ge=1, le=MAX_WAITING)]
    ticket_ttl: Duration = Millis(DEFAULT_TICKET_TTL_MS)
    on_store_failure: Literal["local", "open", "closed"] = "local"

    @model_validator(mode="after")
    def _ttl(self) -> WaitingRoom:
        enforce(self, (_TICKET_TTL,))
        return self
