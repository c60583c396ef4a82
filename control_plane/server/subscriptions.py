"""What one Envoy has, what it asked for, and what it should get next.

Both protocol variants (state of the world and delta) keep this state and ask ``plan``
what to send; only the wire format differs. Planning enforces make-before-break:

- a route configuration that points at a new cluster is held back until Envoy has ACKed
  that cluster and its endpoints;
- a cluster that Envoy's current routes still use is kept in CDS until Envoy has ACKed
  routes that no longer use it.

Every watch Envoy opens is answered, also one it re-opens for a resource it already has:

- a cluster sent at a new version is rebuilt by Envoy, and the rebuilt cluster warms
  until an EDS response carries its endpoints, changed or not (while any cluster warms,
  Envoy withholds its CDS ACK, and so every route held back for a new cluster waits
  too). Sending a CDS response marks the endpoints of each cluster in it for resending;
- a delta request that subscribes to a name Envoy already has asks for it again.

One response per type is in flight at a time; the next is planned once Envoy ACKs or
NACKs it. A NACKed set is not sent again: the next send waits for a new snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from control_plane.cache.resource import Resource
from control_plane.cache.snapshot import Snapshot, set_version
from control_plane.cache.types import ResourceType

WILDCARD = "*"


@dataclass
class Inflight:
    nonce: str
    version: str
    target: dict[str, Resource]
    """The client's whole state of this type once it applies the response."""
    snapshot: Snapshot
    sent_at: float


@dataclass
class TypeState:
    kind: ResourceType
    wildcard: bool = False
    names: set[str] = field(default_factory=set)
    requested: bool = False
    """Envoy has asked for this type at least once on this stream."""
    acked: dict[str, Resource] = field(default_factory=dict)
    acked_version: str = ""
    acked_snapshot: Snapshot | None = None
    inflight: Inflight | None = None
    last_sent_version: str = ""
    nacked_version: str = ""
    in_sync: bool = False
    """The last plan found the client already at the latest (nothing to send, nothing refused)."""
    resend: set[str] = field(default_factory=set)
    """Names whose watch Envoy re-opened: the next response carries them even if unchanged."""

    def subscribed(self, name: str) -> bool:
        return self.wildcard or name in self.names

    def acknowledge(self) -> Inflight | None:
        done = self.inflight
        if done is not None:
            if self.wildcard or self.kind.wildcard:
                self.acked = done.target
            else:  # names unsubscribed while the response was in flight are gone
                self.acked = {n: r for n, r in done.target.items() if n in self.names}
            self.acked_version = done.version
            self.acked_snapshot = done.snapshot
            self.inflight = None
            self.nacked_version = ""
        return done

    def reject(self) -> Inflight | None:
        done = self.inflight
        if done is not None:
            self.nacked_version = done.version
            self.inflight = None
        return done


@dataclass(frozen=True)
class Plan:
    kind: ResourceType
    version: str
    target: dict[str, Resource]
    changed: list[Resource]
    """Resources the client lacks or has at another version, or whose watch it re-opened."""
    removed: list[str]
    """Names the client has that the target drops (delta only; SotW removes by omission)."""
    resent: tuple[str, ...] = ()
    """Of ``changed``, the names sent again unchanged because Envoy re-opened their watch."""


class StreamState:
    def __init__(self, *, full_state_for_wildcard: bool) -> None:
        self.types = {kind: TypeState(kind) for kind in ResourceType}
        self._full_state_for_wildcard = full_state_for_wildcard

    def __getitem__(self, kind: ResourceType) -> TypeState:
        return self.types[kind]

    def plan(self, kind: ResourceType, snapshot: Snapshot) -> Plan | None:
        """The next response for ``kind``, or None if there is nothing (safe) to send."""
        state = self.types[kind]
        if not state.requested or state.inflight is not None:
            return None
        target = self._target(kind, snapshot)
        version = set_version(target.values())
        # Marks for names outside the target are dropped: Envoy has no watch on them, and
        # one it opens later is for a name it lacks, which goes out anyway.
        resend = state.resend & target.keys()
        state.resend.clear()
        state.in_sync = version == state.acked_version and not resend
        if version == state.acked_version and not resend:
            if _current_in(target, snapshot.of(kind)):
                # Same resources in a newer snapshot: point at it, so an old snapshot (and
                # every Route in it) is not kept alive by a type that never changes. Not
                # while held back: NACK attribution compares against what Envoy runs.
                state.acked_snapshot = snapshot
            return None
        if version == state.nacked_version:
            return None
        changed = [r for name, r in target.items() if name in resend or _differs(state.acked.get(name), r)]
        resent = tuple(sorted(name for name in resend if not _differs(state.acked.get(name), target[name])))
        removed = [name for name in state.acked if name not in target]
        first = not (state.acked_version or state.nacked_version or state.last_sent_version)
        full_state = kind.wildcard and self._full_state_for_wildcard
        if not changed and not removed and not full_state and not (first and state.wildcard):
            # Nothing to transmit (e.g. a subscription shrank). An empty RDS/EDS response
            # would also let a warming listener start with no routes, so send none. A
            # first wildcard request is always answered: Envoy's start-up waits for it.
            state.acked = target
            state.acked_version = version
            state.in_sync = True
            return None
        return Plan(kind, version, target, changed, removed, resent)

    def sent(self, plan: Plan, nonce: str, snapshot: Snapshot, now: float) -> None:
        """Record ``plan`` as written with ``nonce``; mark what Envoy will wait for again.

        Envoy builds each resource of ``plan.changed`` anew; for a cluster that re-opens
        the watch on its endpoints, which must be answered even though the server's view
        of what Envoy has did not change. Marked now, not at the ACK: Envoy withholds the
        CDS ACK until the cluster has warmed.
        """
        state = self.types[plan.kind]
        state.inflight = Inflight(nonce, plan.version, plan.target, snapshot, now)
        state.last_sent_version = plan.version
        warmed_by = plan.kind.warmed_by
        if warmed_by is not None:
            self.types[warmed_by].resend.update(name for r in plan.changed for name in r.references)

    def _target(self, kind: ResourceType, snapshot: Snapshot) -> dict[str, Resource]:
        state = self.types[kind]
        desired = snapshot.of(kind)
        if kind is ResourceType.CLUSTER:
            target = dict(desired)
            in_use = self._clusters_in_use()
            for name, resource in state.acked.items():
                if name not in target and name in in_use:
                    target[name] = resource
            return target
        if kind in (ResourceType.LISTENER, ResourceType.POLICY):
            return dict(desired)
        target = {}
        names = desired.keys() | state.acked.keys() if state.wildcard else state.names
        live_clusters = self._cluster_names() if kind is ResourceType.ENDPOINT else set()
        for name in sorted(names):
            new = desired.get(name)
            old = state.acked.get(name)
            if kind is ResourceType.ENDPOINT:
                # Endpoints of a cluster kept for make-before-break stay until it goes.
                chosen = new if new is not None else (old if name in live_clusters else None)
            elif new is not None and self._clusters_ready(new.references):
                chosen = new
            else:
                chosen = old
            if chosen is not None:
                target[name] = chosen
        return target

    def _clusters_in_use(self) -> set[str]:
        """Clusters that routes Envoy has applied, or is about to apply, point at."""
        routes = self.types[ResourceType.ROUTE]
        in_use = {c for r in routes.acked.values() for c in r.references}
        if routes.inflight is not None:
            in_use.update(c for r in routes.inflight.target.values() for c in r.references)
        if WILDCARD in in_use:
            # Envoy reported, on reconnect, a route config version we never built: it may
            # use any cluster Envoy has, so keep them all until it ACKs one we know.
            in_use |= set(self.types[ResourceType.CLUSTER].acked)
        return in_use

    def _cluster_names(self) -> set[str]:
        clusters = self.types[ResourceType.CLUSTER]
        names = set(clusters.acked)
        if clusters.inflight is not None:
            names.update(clusters.inflight.target)
        return names

    def _clusters_ready(self, names: tuple[str, ...]) -> bool:
        """Envoy has ACKed each cluster and its endpoints, and no response on the wire
        removes them: Envoy applies that response first (issue 40: a flip back to a
        cluster whose removal was in flight sent routes to no cluster, 503 NC).

        After a CDS or EDS NACK, a route configuration that needs the refused cluster
        waits (Envoy keeps serving the routes it has) until a new snapshot fixes it.
        The one exception is an Envoy that has no routes at all yet: serving every
        route but the broken one beats a listener that never warms.
        """
        clusters = self.types[ResourceType.CLUSTER]
        endpoints = self.types[ResourceType.ENDPOINT]
        if all(_kept(clusters, name) and _kept(endpoints, name) for name in names):
            return True
        routes = self.types[ResourceType.ROUTE]
        never_routed = not routes.acked and routes.inflight is None
        settled = clusters.inflight is None and endpoints.inflight is None
        return never_routed and settled and bool(clusters.nacked_version or endpoints.nacked_version)


def _kept(state: TypeState, name: str) -> bool:
    """``name`` is ACKed, and the response in flight (applied first) does not remove it.

    A new version in flight is fine: Envoy keeps a cluster serving while its replacement
    warms, and updates endpoints in place. Waiting for it would let a stream of endpoint
    changes hold a route change back indefinitely.
    """
    return name in state.acked and (state.inflight is None or name in state.inflight.target)


def _current_in(target: dict[str, Resource], desired: Mapping[str, Resource]) -> bool:
    return all((d := desired.get(name)) is not None and d.version == r.version for name, r in target.items())


def _differs(old: Resource | None, new: Resource) -> bool:
    return old is None or old.version != new.version
