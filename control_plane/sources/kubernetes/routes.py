"""Route custom resources → validated Routes, one quarantine per object.

A bad object never takes others down: it gets ``Accepted=False`` with the reason, and if
an earlier version of it was good, that version keeps serving (what docs/architecture.md calls
keeping the last good state of each source object). Deleting the object removes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from pydantic import ValidationError

from control_plane.errors import Problem
from control_plane.model.loading import route_from_document, validation_problems
from control_plane.model.route import Origin, Route
from control_plane.sources.base import PublishRoutes, RouteSet
from control_plane.sources.kubernetes.watch import Changes, Object

log = structlog.get_logger(component="source.kubernetes")

SOURCE = "kubernetes"


@dataclass(frozen=True)
class ObjectState:
    """What the source knows about one Route object, for its status."""

    key: str
    generation: int
    accepted: bool
    reason: str
    message: str
    serving: Route | None
    """The version that serves: this generation if valid, else the last good one."""


def object_document(obj: Object) -> dict[str, Any]:
    """The parts of a custom resource the schema judges; server-set metadata is not the user's."""
    meta = obj.get("metadata", {})
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace", "default")},
        "spec": obj.get("spec"),
    }


def parse_object(obj: Object) -> tuple[Route | None, list[Problem]]:
    meta = obj.get("metadata", {})
    key = f"{meta.get('namespace')}/{meta.get('name')}"
    origin = Origin(
        SOURCE,
        key,
        str(meta.get("resourceVersion", "")),
        created=str(meta.get("creationTimestamp", "")),
    )
    try:
        return route_from_document(object_document(obj), origin), []
    except ValidationError as exc:
        return None, validation_problems(exc, f"route {key}", None)
    except ValueError as exc:
        return None, [Problem(f"route {key}", "", str(exc))]


class KubernetesRouteSource:
    """Fed by a ResourceWatch on routes.gatehouse.io; publishes the valid set after each batch."""

    def __init__(self, *, on_state: Callable[[ObjectState | str], None] | None = None) -> None:
        self.name = SOURCE
        self._states: dict[str, ObjectState] = {}
        self._publish: PublishRoutes | None = None
        self._on_state = on_state
        self._published: tuple[Route, ...] = ()
        self._announced = False
        self.synced = False

    def attach(self, publish: PublishRoutes) -> None:
        self._publish = publish

    def apply(self, changes: Changes) -> None:
        seen_at = time.monotonic()
        for key, obj in changes.items():
            if obj is None:
                self._states.pop(key, None)
                if self._on_state is not None:
                    self._on_state(key)
                continue
            state = self._judge(key, obj)
            self._states[key] = state
            if self._on_state is not None:
                self._on_state(state)
        self.synced = True
        routes = tuple(s.serving for s in self._states.values() if s.serving is not None)
        unchanged = len(routes) == len(self._published) and all(a is b for a, b in zip(routes, self._published))
        if self._publish is not None and not (unchanged and self._announced):
            # Status writes and other metadata-only updates change nothing that serves.
            self._published = routes
            self._announced = True
            self._publish(RouteSet(SOURCE, "", routes, seen_at))

    def _judge(self, key: str, obj: Object) -> ObjectState:
        generation = int(obj.get("metadata", {}).get("generation", 0))
        previous = self._states.get(key)
        if previous is not None and previous.generation == generation and previous.accepted:
            return previous
        route, problems = parse_object(obj)
        if route is not None:
            return ObjectState(key, generation, True, "Accepted", "route is valid", route)
        message = "; ".join(f"{p.field}: {p.reason}" if p.field else p.reason for p in problems)
        last_good = previous.serving if previous is not None else None
        if last_good is not None:
            message += f" (generation {previous.generation if previous else '?'} keeps serving)"
        log.warning("route_rejected", route=key, generation=generation, problems=[str(p) for p in problems])
        return ObjectState(key, generation, False, "Invalid", message, last_good)

    def states(self) -> dict[str, ObjectState]:
        return dict(self._states)

    def state(self, key: str) -> ObjectState | None:
        return self._states.get(key)

    def status(self) -> dict[str, Any]:
        rejected = {k: s.message for k, s in self._states.items() if not s.accepted}
        return {"name": self.name, "kind": "kubernetes", "routes": len(self._states), "rejected": rejected or None}
