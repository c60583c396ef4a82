"""The contract between sources and the pipeline: a source publishes whole, valid sets."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from control_plane.model.route import Route
from control_plane.translator.endpoints import EndpointTable


@dataclass(frozen=True)
class RouteSet:
    """Every route one source holds at one revision. A source never publishes part of one."""

    source: str
    revision: str
    routes: tuple[Route, ...]
    seen_at: float = field(default_factory=time.monotonic)


PublishRoutes = Callable[[RouteSet], None]
PublishEndpoints = Callable[[EndpointTable, float], None]


class RouteSource(Protocol):
    name: str

    async def run(self, publish: PublishRoutes) -> None:
        """Publish the first valid set, then each later one; runs until cancelled."""

    def status(self) -> dict[str, Any]:
        """What an operator needs: revision served, last error."""


class EndpointSource(Protocol):
    name: str

    async def run(self, publish: PublishEndpoints) -> None:
        """Publish the endpoint table, then each change; runs until cancelled."""

    def status(self) -> dict[str, Any]: ...
