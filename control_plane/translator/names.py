"""Names shared between resources: the links that must stay consistent across types."""

from __future__ import annotations

from dataclasses import dataclass

LISTENER_NAME = "gatehouse_http"
ROUTE_CONFIG_NAME = "gatehouse_http"
METADATA_NAMESPACE = "gatehouse"


@dataclass(frozen=True, order=True, slots=True)
class ClusterRef:
    """A backend service port: one Envoy cluster and one EDS resource."""

    namespace: str
    service: str
    port: int

    @property
    def name(self) -> str:
        return f"{self.namespace}/{self.service}:{self.port}"
