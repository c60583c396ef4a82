"""Validated Routes → Envoy resources. Each module owns one concern; the entry points are
``RouteTranslator.translate`` (routes → listeners, routes, clusters, rate-limit policies,
secrets), ``EndpointTranslator.translate`` (endpoint tables → EDS) and ``edge_resources``
(one node group's listener and secret). ``http_filters.HTTP_FEATURES`` lists the gateway
features, one module each, in filter-chain order."""

from control_plane.translator.edge import Edge, edge_resources
from control_plane.translator.endpoints import Endpoint, EndpointTable
from control_plane.translator.pipeline import EndpointTranslator, RouteTranslator, Translation
from control_plane.translator.settings import GatewaySettings
from control_plane.translator.names import ClusterRef

__all__ = [
    "ClusterRef",
    "Edge",
    "Endpoint",
    "EndpointTable",
    "EndpointTranslator",
    "GatewaySettings",
    "RouteTranslator",
    "Translation",
    "edge_resources",
]
