"""A snapshot is a value: every resource Envoy should have, per type, and why.

Versions are content hashes, so two control-plane replicas (or one restarted) that
compute the same config give it the same version, and Envoy sees no spurious update.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from control_plane.cache.resource import Resource
from control_plane.cache.types import ResourceType
from control_plane.model.route import Route

Resources = Mapping[str, Resource]


def set_version(resources: Iterable[Resource]) -> str:
    """The version of a set of resources: a hash of their names and versions."""
    digest = hashlib.blake2b(digest_size=8)
    for resource in sorted(resources, key=lambda r: r.name):
        digest.update(resource.name.encode())
        digest.update(b"\0")
        digest.update(resource.version.encode())
        digest.update(b"\n")
    return digest.hexdigest()


_NO_RESOURCES: Resources = MappingProxyType({})


def _frozen(resources: Iterable[Resource]) -> Resources:
    return MappingProxyType({r.name: r for r in resources})


@dataclass(frozen=True)
class Snapshot:
    clusters: Resources
    endpoints: Resources
    listeners: Resources
    routes: Resources
    policies: Resources = field(default_factory=lambda: _NO_RESOURCES)
    """Route policies, for the checks that decide routes (Gatehouse's own xDS type)."""
    secrets: Resources = field(default_factory=lambda: _NO_RESOURCES)
    """The listener's TLS secret (file names only), when it terminates TLS."""
    model: tuple[Route, ...] = ()
    """The routes this snapshot was built from: provenance for NACK reports."""
    changed_at: float = field(default_factory=time.monotonic)
    """When the source change that led here was seen; for change-to-push latency."""
    versions: Mapping[ResourceType, str] = field(init=False)
    version: str = field(init=False)

    def __post_init__(self) -> None:
        versions = {kind: set_version(self.of(kind).values()) for kind in ResourceType}
        object.__setattr__(self, "versions", MappingProxyType(versions))
        object.__setattr__(self, "version", set_version_of(versions))

    @classmethod
    def build(
        cls,
        *,
        clusters: Iterable[Resource],
        endpoints: Iterable[Resource],
        listeners: Iterable[Resource],
        routes: Iterable[Resource],
        policies: Iterable[Resource] = (),
        secrets: Iterable[Resource] = (),
        model: tuple[Route, ...] = (),
        changed_at: float | None = None,
    ) -> Snapshot:
        return cls(
            clusters=_frozen(clusters),
            endpoints=_frozen(endpoints),
            listeners=_frozen(listeners),
            routes=_frozen(routes),
            policies=_frozen(policies),
            secrets=_frozen(secrets),
            model=model,
            changed_at=time.monotonic() if changed_at is None else changed_at,
        )

    def of(self, kind: ResourceType) -> Resources:
        if kind is ResourceType.CLUSTER:
            return self.clusters
        if kind is ResourceType.ENDPOINT:
            return self.endpoints
        if kind is ResourceType.LISTENER:
            return self.listeners
        if kind is ResourceType.POLICY:
            return self.policies
        if kind is ResourceType.SECRET:
            return self.secrets
        return self.routes

    def with_endpoints(self, endpoints: Iterable[Resource], *, changed_at: float | None = None) -> Snapshot:
        """The endpoint fast path: same clusters, listeners and routes, new EDS."""
        return replace(
            self,
            endpoints=_frozen(endpoints),
            changed_at=time.monotonic() if changed_at is None else changed_at,
        )

    def with_edge(self, listeners: Iterable[Resource], secrets: Iterable[Resource]) -> Snapshot:
        """The same config behind another node group's listener (and its TLS secret)."""
        return replace(self, listeners=_frozen(listeners), secrets=_frozen(secrets))

    def inconsistencies(self) -> list[str]:
        """What would leave Envoy waiting or routing nowhere; empty when the snapshot is usable."""
        problems = []
        for cluster in self.clusters.values():
            for assignment in cluster.references:  # EDS clusters name their assignment
                if assignment not in self.endpoints:
                    problems.append(f"cluster {cluster.name} has no endpoint assignment")
        for name in self.endpoints:
            if name not in self.clusters:
                problems.append(f"endpoint assignment {name} names no cluster")
        for route in self.routes.values():
            for target in route.references:
                if target not in self.clusters:
                    problems.append(f"route config {route.name} points at missing cluster {target}")
        named = {name for listener in self.listeners.values() for name in listener.references}
        for listener in self.listeners.values():
            for name in listener.references:
                if name not in self.routes and name not in self.secrets:
                    problems.append(f"listener {listener.name} points at missing route config or secret {name}")
        for name in self.routes:
            if name not in named:
                problems.append(f"route config {name} is named by no listener")
        return problems


def set_version_of(versions: Mapping[ResourceType, str]) -> str:
    digest = hashlib.blake2b(digest_size=8)
    for kind in ResourceType:
        digest.update(versions[kind].encode())
    return digest.hexdigest()
