"""A validated Route together with where it came from.

Provenance travels with every route, so that each Envoy resource generated from it, and
every NACK Envoy sends about those resources, can be traced back to a file or object.
Routes compare by identity: an unchanged source document yields the same object, which
is what the translator's per-route cache keys on.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from control_plane.model.paths import PathPattern, parse_path
from control_plane.model.schema import RouteSpec


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a route was defined: a file in a commit, or a Kubernetes object."""

    source: str
    """"git", "file" or "kubernetes"."""
    location: str
    """A path relative to the source root, or "namespace/name" for an object."""
    revision: str = ""
    """Commit sha, or the object's resourceVersion."""
    line: int | None = None
    created: str = ""
    """When the object was created (RFC 3339), where the source knows: the tie-break for conflicts."""

    def __str__(self) -> str:
        where = f"{self.location}:{self.line}" if self.line else self.location
        at = f"@{self.revision[:12]}" if self.revision else ""
        return f"{self.source}:{where}{at}"


@dataclass(frozen=True, eq=False)
class Route:
    namespace: str
    name: str
    spec: RouteSpec
    origin: Origin

    @cached_property
    def id(self) -> str:
        return f"{self.namespace}/{self.name}"

    @cached_property
    def path(self) -> PathPattern | None:
        """The parsed `match.path`, if the route uses one."""
        text = self.spec.match.path
        return parse_path(text) if text is not None else None

    def backend_namespace(self, explicit: str | None) -> str:
        return explicit or self.namespace
