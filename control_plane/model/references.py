"""Cross-namespace Service references, and the ReferenceGrants that permit them.

A route names Services in ``backends`` and in ``fallback.backend``, in its own namespace
unless it says otherwise. As in Gateway API, a reference into another namespace is that
namespace's owner's to allow: it holds only while the target namespace has a
ReferenceGrant (``gateway.networking.k8s.io``) whose ``from`` lists group ``gatehouse.io``,
kind ``Route``, namespace = the route's, and whose ``to`` lists group ``""`` (core), kind
``Service``, with the Service's name or no name (every Service there). Entries of ``from``
are ORed, and so are those of ``to``; there are no wildcards (the spec has none: a
``from.namespace`` is one namespace, and ``group``/``kind`` are compared exactly).

A route with any reference no grant permits is left out of the configuration whole (Envoy
answers 404 for its requests) and reported ``ResolvedRefs=False``; no other route changes.

Which grants count: a grant from the Kubernetes API (``cluster``) counts for the routes of
every source, since there the namespace's owner consented where namespaces are access
boundaries; a grant written in a Git repo counts only for that repo's own routes, since a
repo is its own trust domain and must not open a cluster namespace to the cluster's tenants.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from control_plane.model.route import Origin, Route

ROUTE_GROUP = "gatehouse.io"
ROUTE_KIND = "Route"
SERVICE_GROUP = ""
"""The core API group, which a ReferenceGrant writes as the empty string."""
SERVICE_KIND = "Service"


@dataclass(frozen=True, slots=True)
class GrantFrom:
    group: str
    kind: str
    namespace: str


@dataclass(frozen=True, slots=True)
class GrantTo:
    group: str
    kind: str
    name: str | None = None
    """None: every object of the kind in the grant's namespace."""


@dataclass(frozen=True)
class ReferenceGrant:
    """One ReferenceGrant, as the rule reads it (parsed by ``reference_grants.py``)."""

    namespace: str
    """Where the grant lives: the namespace whose objects it opens."""
    name: str
    sources: tuple[GrantFrom, ...]
    """The spec's ``from`` (a Python keyword)."""
    targets: tuple[GrantTo, ...]
    """The spec's ``to``."""
    origin: Origin
    cluster: bool
    """From the Kubernetes API (counts for every source), else from a route source's files
    (counts for that source's routes only)."""

    @property
    def id(self) -> str:
        return f"{self.namespace}/{self.name}"

    def permits(self, *, group: str, kind: str, namespace: str, to_group: str, to_kind: str, to_name: str) -> bool:
        """Whether an object of ``group``/``kind`` in ``namespace`` may refer to the object
        ``to_group``/``to_kind``/``to_name`` in this grant's namespace."""
        return any(f.group == group and f.kind == kind and f.namespace == namespace for f in self.sources) and any(
            t.group == to_group and t.kind == to_kind and (t.name is None or t.name == to_name) for t in self.targets
        )


@dataclass(frozen=True, slots=True)
class ServiceReference:
    field: str
    """Where the route names it: ``spec.backends[1]`` or ``spec.fallback.backend``."""
    namespace: str
    service: str


def crossing_references(route: Route) -> Iterator[ServiceReference]:
    """The route's references to Services outside its own namespace."""
    home = route.namespace
    for index, backend in enumerate(route.spec.backends):
        if backend.namespace is not None and backend.namespace != home:
            yield ServiceReference(f"spec.backends[{index}]", backend.namespace, backend.service)
    fallback = route.spec.fallback
    if fallback is not None and fallback.backend is not None:
        namespace = fallback.backend.namespace
        if namespace is not None and namespace != home:
            yield ServiceReference("spec.fallback.backend", namespace, fallback.backend.service)


class Grants:
    """The grants that count for one set of routes, indexed for the check: which Services
    of a target namespace the routes of a source namespace may name."""

    def __init__(self, grants: Iterable[ReferenceGrant]) -> None:
        self._open: dict[tuple[str, str], frozenset[str] | None] = {}
        """(target namespace, route namespace) → the Service names, None: every Service."""
        for grant in grants:
            froms = {f.namespace for f in grant.sources if f.group == ROUTE_GROUP and f.kind == ROUTE_KIND}
            tos = [t for t in grant.targets if t.group == SERVICE_GROUP and t.kind == SERVICE_KIND]
            if not froms or not tos:
                continue
            names = None if any(t.name is None for t in tos) else frozenset(t.name for t in tos if t.name is not None)
            for namespace in froms:
                key = (grant.namespace, namespace)
                if key not in self._open:
                    self._open[key] = names
                else:
                    held = self._open[key]
                    self._open[key] = None if held is None or names is None else held | names

    def permits(self, route_namespace: str, reference: ServiceReference) -> bool:
        if reference.namespace == route_namespace:
            return True
        key = (reference.namespace, route_namespace)
        if key not in self._open:
            return False
        names = self._open[key]
        return names is None or reference.service in names


@dataclass(frozen=True)
class Unresolved:
    """A route left out because a grant is missing for some of its references."""

    route: Route
    references: tuple[ServiceReference, ...]

    @property
    def message(self) -> str:
        return "; ".join(
            f"{r.field}: Service {r.namespace}/{r.service} is in another namespace and no ReferenceGrant permits it: "
            f"{r.namespace} needs a ReferenceGrant from {{group: {ROUTE_GROUP}, kind: {ROUTE_KIND}, "
            f'namespace: {self.route.namespace}}} to {{group: "", kind: {SERVICE_KIND}, name: {r.service}}}'
            for r in self.references
        )


class Published(Protocol):
    """What one source published (``sources.base.RouteSet``): its routes and its grants."""

    @property
    def routes(self) -> Sequence[Route]: ...

    @property
    def grants(self) -> Sequence[ReferenceGrant]: ...


def permitted_routes(published: Sequence[Published]) -> tuple[list[Route], list[Unresolved]]:
    """Every route whose references all hold, in order, and the others with what is missing.

    The grants from the cluster count for every set's routes, a set's own for its own."""
    cluster = [grant for one in published for grant in one.grants if grant.cluster]
    shared = Grants(cluster)
    kept: list[Route] = []
    unresolved: list[Unresolved] = []
    for one in published:
        own = [grant for grant in one.grants if not grant.cluster]
        grants = Grants([*cluster, *own]) if own else shared
        for route in one.routes:
            missing = tuple(r for r in crossing_references(route) if not grants.permits(route.namespace, r))
            if missing:
                unresolved.append(Unresolved(route, missing))
            else:
                kept.append(route)
    return kept, unresolved
