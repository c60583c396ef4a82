"""Validated Routes → Envoy resources. Each module owns one concern; ``translate`` runs them."""

from control_plane.translator.endpoints import Endpoint, EndpointTable, translate_endpoints
from control_plane.translator.pipeline import EndpointTranslator, RouteTranslator, Translation
from control_plane.translator.settings import GatewaySettings
from control_plane.translator.names import ClusterRef

__all__ = [
    "ClusterRef",
    "Endpoint",
    "EndpointTable",
    "EndpointTranslator",
    "GatewaySettings",
    "RouteTranslator",
    "Translation",
    "translate_endpoints",
]
