"""xDS type URLs, in the order ADS must apply them (make before break)."""

from __future__ import annotations

from enum import IntEnum

_PREFIX = "type.googleapis.com/envoy.config"


class ResourceType(IntEnum):
    """Ordered: a cluster and its endpoints exist before a listener or route uses them."""

    CLUSTER = 0
    ENDPOINT = 1
    LISTENER = 2
    ROUTE = 3

    @property
    def url(self) -> str:
        return _URLS[self]

    @property
    def short(self) -> str:
        return _SHORT[self]

    @property
    def wildcard(self) -> bool:
        """LDS and CDS send the whole set; EDS and RDS send what was asked for by name."""
        return self in (ResourceType.CLUSTER, ResourceType.LISTENER)

    @classmethod
    def from_url(cls, url: str) -> ResourceType | None:
        return _BY_URL.get(url)


CLUSTER_URL = f"{_PREFIX}.cluster.v3.Cluster"
ENDPOINT_URL = f"{_PREFIX}.endpoint.v3.ClusterLoadAssignment"
LISTENER_URL = f"{_PREFIX}.listener.v3.Listener"
ROUTE_URL = f"{_PREFIX}.route.v3.RouteConfiguration"

_URLS = {
    ResourceType.CLUSTER: CLUSTER_URL,
    ResourceType.ENDPOINT: ENDPOINT_URL,
    ResourceType.LISTENER: LISTENER_URL,
    ResourceType.ROUTE: ROUTE_URL,
}
_SHORT = {
    ResourceType.CLUSTER: "CDS",
    ResourceType.ENDPOINT: "EDS",
    ResourceType.LISTENER: "LDS",
    ResourceType.ROUTE: "RDS",
}
_BY_URL = {url: kind for kind, url in _URLS.items()}
