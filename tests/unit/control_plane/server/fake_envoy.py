"""An in-process Envoy for driving ``SotwStream`` and ``DeltaStream``, that enforces the protocol.

It behaves like Envoy's ADS client: it opens with CDS and LDS wildcard requests, applies
and ACKs every response with its nonce (or NACKs the ones it is told to), subscribes EDS
to the clusters it has and RDS to the route configurations its listeners name.

Cluster warming is Envoy's (checked against Envoy 1.40): a cluster that a CDS response
adds or changes is built anew and warms until an EDS response *after* that CDS response
carries its assignment, changed or not. Once its first clusters have warmed, Envoy
withholds every CDS ACK while any cluster warms. A rebuilt cluster re-opens its EDS
watch: over SotW that sends an EDS request with unchanged names (and another when the
replaced cluster goes), over delta nothing at all. Nothing here gives up waiting;
``fetch_timeout`` plays Envoy's 15 s ``initial_fetch_timeout`` when a test wants it.

Every response the server writes is checked as it arrives, and a violation fails the
test (the stream's ``run`` raises it):

- the type URL is one this Envoy asked for, and each resource inside carries it;
- nonces are integers that strictly increase (so are unique) on the stream;
- the version (``version_info`` / ``system_version_info``) is not empty;
- at most one response per type is in flight: the answer to the previous one of the
  same type has been read by the server before the next is written;
- make before break: a route configuration only names clusters whose CDS *and* EDS ACKs
  the server has already read, and CDS never removes a cluster that the routes Envoy
  runs still use.

Resources are tracked by name and content version (``content_hash`` of the serialized
message, which is how the cache versions translator output).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2
from envoy.service.discovery.v3 import discovery_pb2
from google.rpc import status_pb2

from control_plane.cache import ResourceType, Snapshot, content_hash

CDS, EDS, LDS, RDS = ResourceType.CLUSTER, ResourceType.ENDPOINT, ResourceType.LISTENER, ResourceType.ROUTE
INTERNAL = 13  # what Envoy puts in error_detail.code when it rejects a config


class ProtocolViolation(AssertionError):
    pass


@dataclass
class Received:
    """One response as this Envoy saw it."""

    kind: ResourceType
    nonce: int
    version: str
    resources: dict[str, bytes]
    """Name → serialized resource, as carried in the response."""
    removed: list[str]
    message: Any
    answer: str = ""
    """"ack", "nack" or "" while unanswered."""

    @property
    def names(self) -> list[str]:
        return sorted(self.resources)


def resource_name(kind: ResourceType, body: bytes) -> str:
    if kind is CDS:
        return str(cluster_pb2.Cluster.FromString(body).name)
    if kind is EDS:
        return str(endpoint_pb2.ClusterLoadAssignment.FromString(body).cluster_name)
    if kind is LDS:
        return str(listener_pb2.Listener.FromString(body).name)
    return str(route_pb2.RouteConfiguration.FromString(body).name)


def route_clusters(body: bytes) -> set[str]:
    """Every cluster a RouteConfiguration sends traffic to."""
    config = route_pb2.RouteConfiguration.FromString(body)
    clusters: set[str] = set()
    for vhost in config.virtual_hosts:
        for route in vhost.routes:
            if not route.HasField("route"):
                continue
            action = route.route
            if action.cluster:
                clusters.add(action.cluster)
            clusters.update(w.name for w in action.weighted_clusters.clusters)
    return clusters


def eds_assignment(body: bytes) -> str | None:
    """The ClusterLoadAssignment an EDS cluster waits for; None for other cluster types."""
    cluster = cluster_pb2.Cluster.FromString(body)
    if cluster.type != cluster_pb2.Cluster.EDS:
        return None
    return str(cluster.eds_cluster_config.service_name or cluster.name)


def listener_route_configs(body: bytes) -> set[str]:
    listener = listener_pb2.Listener.FromString(body)
    names: set[str] = set()
    for chain in listener.filter_chains:
        for network_filter in chain.filters:
            hcm = http_connection_manager_pb2.HttpConnectionManager()
            if network_filter.typed_config.Unpack(hcm) and hcm.HasField("rds"):
                names.add(hcm.rds.route_config_name)
    return names


@dataclass
class FakeEnvoy:
    delta: bool
    node_id: str = "envoy-1"
    group: str = "gateway"
    have: dict[ResourceType, dict[str, bytes]] = field(default_factory=lambda: {k: {} for k in ResourceType})
    """The config this Envoy runs: what it applied and ACKed."""
    confirmed: dict[ResourceType, dict[str, bytes]] = field(default_factory=lambda: {k: {} for k in ResourceType})
    """The config the server knows this Envoy runs: ACKs the server has read."""
    nack_next: dict[ResourceType, str] = field(default_factory=dict)
    """Refuse the next response of a type with this error message."""
    received: list[Received] = field(default_factory=list)
    manual: set[ResourceType] = field(default_factory=set)
    """Types whose responses this Envoy records but leaves for the test to answer."""
    initialized: bool = False
    """Its first clusters have warmed; from then on a CDS ACK waits for warming clusters."""
    warming: dict[str, str] = field(default_factory=dict)
    """Cluster → the assignment it waits for (built by a CDS response, no EDS answer since)."""
    timed_out: list[str] = field(default_factory=list)
    """Clusters that ``fetch_timeout`` let stop warming without their endpoints."""

    def __post_init__(self) -> None:
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._requested: set[ResourceType] = set()
        self._subscribed: dict[ResourceType, set[str]] = {EDS: set(), RDS: set()}
        self._last_nonce = 0
        self._accepted_version: dict[ResourceType, str] = {}
        self._last_nonce_of: dict[ResourceType, str] = {}
        self._unread_answer: dict[ResourceType, int] = {}
        """Per type: nonce of the last response whose answer the server has not read yet."""
        self._pending_confirm: dict[str, tuple[ResourceType, dict[str, bytes]]] = {}
        self._sent_node = False
        self._held_cds: Received | None = None
        self._rebuilt: set[str] = set()
        """Warming clusters that replace one of the same name."""
        """A CDS response applied whose ACK waits until no cluster warms."""
        self._task: asyncio.Task[None] | None = None
        self.reads = 0

    # -- running a stream ------------------------------------------------------------

    def start(self, stream: Any, *, initial: bool = True) -> None:
        if initial:
            self.request(CDS)
            self.request(LDS)
        self._task = asyncio.get_running_loop().create_task(stream.run(self.requests()))

    async def requests(self) -> AsyncIterator[Any]:
        while True:
            message = await self._queue.get()
            if message is None:
                return
            self._on_read(message)
            yield message

    async def close(self) -> None:
        self._queue.put_nowait(None)
        assert self._task is not None
        await asyncio.wait_for(self._task, 5)

    async def settle(self, quiet: float = 0.03, timeout: float = 5.0) -> None:
        """Wait until the server has read every request and written nothing for ``quiet`` s."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        last: tuple[int, int] | None = None
        since = loop.time()
        while True:
            if self._task is not None and self._task.done():
                self._task.result()  # a protocol violation raised inside write() surfaces here
                raise AssertionError("the stream ended while Envoy was still connected")
            now = (len(self.received), self.reads)
            if now != last or not self._queue.empty():
                last, since = now, loop.time()
            elif loop.time() - since >= quiet:
                return
            if loop.time() > deadline:
                raise TimeoutError("the stream did not go quiet")
            await asyncio.sleep(0.001)

    # -- what Envoy sends ------------------------------------------------------------

    def request(
        self,
        kind: ResourceType,
        names: Iterable[str] = (),
        *,
        initial_versions: dict[str, str] | None = None,
    ) -> None:
        """A first request for a type (wildcard when no names are given)."""
        self._requested.add(kind)
        names = sorted(names)
        if kind in self._subscribed:
            self._subscribed[kind] = set(names)
        if self.delta:
            self.send(
                discovery_pb2.DeltaDiscoveryRequest(
                    type_url=kind.url,
                    resource_names_subscribe=names,
                    initial_resource_versions=initial_versions or {},
                )
            )
        else:
            self.send(discovery_pb2.DiscoveryRequest(type_url=kind.url, resource_names=names))

    def send(self, message: Any) -> None:
        if not self._sent_node:
            message.node.CopyFrom(base_pb2.Node(id=self.node_id, cluster=self.group))
            self._sent_node = True
        self._queue.put_nowait(message)

    def drain(self) -> list[Any]:
        """Take what this Envoy has sent, as a server reads it (for tests playing the server)."""
        messages = []
        while not self._queue.empty():
            message = self._queue.get_nowait()
            self._on_read(message)
            messages.append(message)
        return messages

    def _on_read(self, message: Any) -> None:
        """The server is about to handle ``message``: from now on it knows what it says."""
        self.reads += 1
        kind = ResourceType.from_url(message.type_url)
        if kind is None or not message.response_nonce:
            return
        if self._unread_answer.get(kind) == int(message.response_nonce):
            del self._unread_answer[kind]
        pending = self._pending_confirm.pop(message.response_nonce, None)
        if pending is not None and not message.error_detail.message and not message.error_detail.code:
            self.confirmed[kind] = dict(pending[1])

    def _answer(self, received: Received, error: str) -> None:
        kind = received.kind
        nonce = str(received.nonce)
        self._last_nonce_of[kind] = nonce
        self._unread_answer[kind] = received.nonce
        detail = status_pb2.Status(code=INTERNAL, message=error) if error else None
        if self.delta:
            request = discovery_pb2.DeltaDiscoveryRequest(type_url=kind.url, response_nonce=nonce)
        else:
            request = discovery_pb2.DiscoveryRequest(
                type_url=kind.url,
                response_nonce=nonce,
                version_info=self._accepted_version.get(kind, "") if error else received.version,
                resource_names=sorted(self._subscribed.get(kind, ())),
            )
        if detail is not None:
            request.error_detail.CopyFrom(detail)
        else:
            self._accepted_version[kind] = received.version
            self._pending_confirm[nonce] = (kind, dict(self.have[kind]))
        received.answer = "nack" if error else "ack"
        self.send(request)

    def _subscribe(self, kind: ResourceType, names: set[str], *, reopened: bool = False) -> None:
        """Envoy's watches for EDS/RDS follow the clusters and listeners it has.

        ``reopened``: a watch was replaced by one for the same name. Envoy's SotW client
        still sends a request (unchanged names); its delta client sends nothing.
        """
        old = self._subscribed[kind]
        if names == old and not (reopened and not self.delta and kind in self._requested):
            return
        self._subscribed[kind] = set(names)
        first = kind not in self._requested
        self._requested.add(kind)
        if self.delta:
            self.send(
                discovery_pb2.DeltaDiscoveryRequest(
                    type_url=kind.url,
                    resource_names_subscribe=sorted(names - old),
                    resource_names_unsubscribe=sorted(old - names),
                )
            )
        else:
            self.send(
                discovery_pb2.DiscoveryRequest(
                    type_url=kind.url,
                    version_info="" if first else self._accepted_version.get(kind, ""),
                    response_nonce="" if first else self._last_nonce_of.get(kind, ""),
                    resource_names=sorted(names),
                )
            )
        for name in old - names:
            self.have[kind].pop(name, None)

    # -- what the server writes ------------------------------------------------------

    async def write(self, response: Any) -> None:
        received = self._check(response)
        self.received.append(received)
        if received.kind in self.manual:
            self._unread_answer[received.kind] = received.nonce
            return
        error = self.nack_next.pop(received.kind, "")
        if error:
            self._answer(received, error)
            return
        if received.kind is CDS:
            before = dict(self.have[CDS])
            self._apply(received)
            built = {n: a for n, body in self.have[CDS].items() if before.get(n) != body and (a := eds_assignment(body))}
            self.warming = {n: a for n, a in {**self.warming, **built}.items() if n in self.have[CDS]}
            self._rebuilt = (self._rebuilt | (built.keys() & before.keys())) & self.warming.keys()
            assignments = {a for body in self.have[CDS].values() if (a := eds_assignment(body))}
            self._subscribe(EDS, assignments, reopened=bool(built.keys() & before.keys()))
            if self.warming and self.initialized:
                self._held_cds = received  # Envoy pauses CDS while clusters warm
                self._unread_answer[CDS] = received.nonce
            else:
                self._answer(received, "")
            self.initialized = self.initialized or not self.warming
            return
        self._apply(received)
        if received.kind is EDS:
            self._warmed({n for n, a in self.warming.items() if a in received.resources})
        self._answer(received, "")
        if received.kind is LDS:
            self._subscribe(RDS, {n for body in self.have[LDS].values() for n in listener_route_configs(body)})

    def _warmed(self, clusters: set[str]) -> None:
        """``clusters`` got their endpoints: they serve, the clusters they replace go."""
        if not clusters:
            return
        for name in clusters:
            del self.warming[name]
        replaced, self._rebuilt = self._rebuilt & clusters, self._rebuilt - clusters
        if replaced:  # the old cluster's watch closes: SotW says so with the same names
            self._subscribe(EDS, set(self._subscribed[EDS]), reopened=True)
        if not self.warming:
            self.initialized = True
            held, self._held_cds = self._held_cds, None
            if held is not None:
                del self._unread_answer[CDS]
                self._answer(held, "")

    def fetch_timeout(self) -> list[str]:
        """What Envoy does after ``initial_fetch_timeout`` (15 s by default): warming
        clusters stop waiting for their endpoints and the withheld CDS ACK goes out."""
        names = sorted(self.warming)
        self.timed_out.extend(names)
        self._warmed(set(names))
        return names

    def _check(self, response: Any) -> Received:
        def require(ok: bool, what: str) -> None:
            if not ok:
                raise ProtocolViolation(f"{what}: {response}")

        kind = ResourceType.from_url(response.type_url)
        require(kind is not None and kind in self._requested, f"response for a type never requested ({response.type_url})")
        assert kind is not None
        require(response.nonce.isdigit(), "nonce is not a counter")
        nonce = int(response.nonce)
        require(nonce > self._last_nonce, f"nonce {nonce} does not increase (last {self._last_nonce})")
        self._last_nonce = nonce
        require(kind not in self._unread_answer, f"second {kind.short} response before the server read the answer to the first")
        resources: dict[str, bytes] = {}
        if self.delta:
            version = response.system_version_info
            for item in response.resources:
                require(item.resource.type_url == response.type_url, "resource type does not match the response")
                require(bool(item.version), "delta resource without a version")
                require(item.name == resource_name(kind, item.resource.value), "delta resource name does not match its body")
                require(item.version == content_hash(item.resource.value), "delta resource version is not its content hash")
                resources[item.name] = item.resource.value
            removed = list(response.removed_resources)
            require(not set(removed) & set(resources), "a resource both updated and removed")
        else:
            version = response.version_info
            for item in response.resources:
                require(item.type_url == response.type_url, "resource type does not match the response")
                resources[resource_name(kind, item.value)] = item.value
            removed = []
        require(bool(version), "empty version")
        require(len(resources) == (len(response.resources)), "the same resource twice in one response")
        received = Received(kind, nonce, version, resources, removed, response)
        if kind is RDS:
            for name, body in resources.items():
                for cluster in route_clusters(body):
                    require(
                        cluster in self.confirmed[CDS] and cluster in self.confirmed[EDS],
                        f"route config {name} points at {cluster} before its CDS and EDS ACKs were read",
                    )
                    # What Envoy has once every CDS response written before this one applies.
                    require(cluster in self.have[CDS], f"route config {name} points at {cluster}, which a CDS response already sent removed")
        if kind is CDS:
            after = set(resources) if not self.delta else (set(self.have[CDS]) - set(removed)) | set(resources)
            used = {c for body in self.have[RDS].values() for c in route_clusters(body)}
            require(used <= after, f"CDS drops {sorted(used - after)} while Envoy's routes use them")
        return received

    def _apply(self, received: Received) -> None:
        kind = received.kind
        have = self.have[kind]
        if not self.delta and kind.wildcard:
            have.clear()
        subscribed = self._subscribed.get(kind)
        for name, body in received.resources.items():
            if subscribed is not None and name not in subscribed:
                continue  # Envoy ignores resources it has no watch for
            have[name] = body
        for name in received.removed:
            have.pop(name, None)
        if kind is CDS:
            for name in list(self.have[EDS]):
                if name not in have:
                    del self.have[EDS][name]

    # -- views for assertions ----------------------------------------------------------

    def versions(self, kind: ResourceType) -> dict[str, str]:
        return {name: content_hash(body) for name, body in self.have[kind].items()}

    def responses(self, since: int = 0, kind: ResourceType | None = None) -> list[Received]:
        return [r for r in self.received[since:] if kind is None or r.kind is kind]

    def types(self, since: int = 0) -> list[str]:
        return [r.kind.short for r in self.received[since:]]

    def runs(self, snapshot: Snapshot) -> bool:
        """Envoy has the snapshot and serves it: no cluster still warms, no ACK withheld."""
        settled = not self.warming and self._held_cds is None
        return settled and all(self.versions(kind) == snapshot_versions(snapshot, kind) for kind in ENVOY_TYPES)


# What a plain-HTTP Envoy asks for (SDS only with TLS; rate-limit policies never).
ENVOY_TYPES = tuple(kind for kind in ResourceType if kind not in (ResourceType.POLICY, ResourceType.SECRET))
"""What Envoy subscribes to; rate-limit policies are for ratelimit_svc."""


def snapshot_versions(snapshot: Snapshot, kind: ResourceType) -> dict[str, str]:
    return {name: r.version for name, r in snapshot.of(kind).items()}
