"""A route's ``backends``: the weighted services it sends requests to (weights need not
sum to 100), and the rules the route puts on the list."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from pydantic import Field

from servicekit.model import Model
from control_plane.model.shared_types import Namespace, ServiceName


class Backend(Model):
    service: ServiceName
    port: Annotated[int, Field(ge=1, le=65535)]
    weight: Annotated[int, Field(ge=0, le=1_000_000)] = 1
    namespace: Namespace | None = None
    """Defaults to the route's namespace."""


BACKENDS_SPEC_RULES = (
    (
        "has(self.disabled) || (has(self.backends) && size(self.backends) > 0)",
        "at least one backend is required (or set disabled)",
    ),
    (
        "has(self.disabled) || !has(self.backends) || size(self.backends) == 0"
        " || self.backends.exists(b, !has(b.weight) || b.weight > 0)",
        "at least one backend needs a weight above 0",
    ),
)
"""The CEL form, on ``RouteSpec``, of ``check_backends``."""


def check_backends(backends: Sequence[Backend], *, disabled: bool) -> None:
    """A route that answers from an upstream needs one it can send to; ValueError."""
    if not disabled:
        if not backends:
            raise ValueError("backends: at least one backend is required (or set disabled)")
        if all(b.weight == 0 for b in backends):
            raise ValueError("backends: at least one backend needs a weight above 0")
