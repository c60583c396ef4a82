"""xDS type URLs, in the order ADS must apply them (make before break).

Besides Envoy's types (SDS only for the listener's TLS secret, which names files and
holds no key bytes) there is one of Gatehouse's own: route policies
(``gatehouse.policy.v1.RoutePolicy``), a route's rules for the checks, which the
Authorization service and ratelimit_svc subscribe to over the same ADS server (Envoy never
asks for it).
"""

from __future__ import annotations

from enum import IntEnum

from servicekit.protos.gatehouse.policy.v1 import policy_pb2

_PREFIX = "type.googleapis.com/envoy.config"


class ResourceType(IntEnum):
    """Ordered: a cluster and its endpoints, and the listener's TLS secret, exist before a
    listener or route uses them."""

    CLUSTER = 0
    ENDPOINT = 1
    SECRET = 2
    LISTENER = 3
    ROUTE = 4
    POLICY = 5

    @property
    def url(self) -> str:
        return _URLS[self]

    @property
    def short(self) -> str:
        return _SHORT[self]

    @property
    def wildcard(self) -> bool:
        """LDS, CDS (and route policies) send the whole set; EDS and RDS what was asked for."""
        return self in (ResourceType.CLUSTER, ResourceType.LISTENER, ResourceType.POLICY)

    @property
    def warmed_by(self) -> ResourceType | None:
        """The type a new or changed resource of this type waits for before it serves.

        Envoy builds a changed cluster anew and, like a new one, keeps it warming until a
        response carrying its endpoints arrives, even endpoints it already has (the xDS
        protocol's "resource warming"). Meanwhile its CDS ACK is withheld.
        """
        return ResourceType.ENDPOINT if self is ResourceType.CLUSTER else None

    @classmethod
    def from_url(cls, url: str) -> ResourceType | None:
        return _BY_URL.get(url)


CLUSTER_URL = f"{_PREFIX}.cluster.v3.Cluster"
ENDPOINT_URL = f"{_PREFIX}.endpoint.v3.ClusterLoadAssignment"
LISTENER_URL = f"{_PREFIX}.listener.v3.Listener"
ROUTE_URL = f"{_PREFIX}.route.v3.RouteConfiguration"
SECRET_URL = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"  # noqa: S105 - a type URL, not a secret
POLICY_URL = f"type.googleapis.com/{policy_pb2.RoutePolicy.DESCRIPTOR.full_name}"

_URLS = {
    ResourceType.CLUSTER: CLUSTER_URL,
    ResourceType.ENDPOINT: ENDPOINT_URL,
    ResourceType.SECRET: SECRET_URL,
    ResourceType.LISTENER: LISTENER_URL,
    ResourceType.ROUTE: ROUTE_URL,
    ResourceType.POLICY: POLICY_URL,
}
_SHORT = {
    ResourceType.CLUSTER: "CDS",
    ResourceType.ENDPOINT: "EDS",
    ResourceType.SECRET: "SDS",
    ResourceType.LISTENER: "LDS",
    ResourceType.ROUTE: "RDS",
    ResourceType.POLICY: "POLICY",
}
_BY_URL = {url: kind for kind, url in _URLS.items()}
