"""The edge: what a node group's Envoys have of their own, its listener and TLS secret.

Routes, clusters and endpoints are the same for every node group; where a group listens,
its limits and its TLS are not. ``edge_resources`` is the translator's entry point for
them: the default listener of every translation, and each node group's (``nodeGroups``).
"""

from __future__ import annotations

from dataclasses import dataclass

from control_plane.cache.resource import Resource
from control_plane.cache.types import ResourceType
from control_plane.translator.listeners import http_listener
from control_plane.translator.names import LISTENER_NAME, ROUTE_CONFIG_NAME
from control_plane.translator.settings import GatewaySettings
from control_plane.translator.tls import SECRET_NAME, secret_resources


@dataclass(frozen=True, slots=True)
class Edge:
    listeners: tuple[Resource, ...]
    secrets: tuple[Resource, ...]


def edge_resources(settings: GatewaySettings) -> Edge:
    """The HTTP listener of one node group, and its TLS secret if it terminates TLS."""
    return Edge((listener_resource(settings),), secret_resources(settings))


def listener_resource(settings: GatewaySettings) -> Resource:
    return Resource.from_message(
        ResourceType.LISTENER,
        LISTENER_NAME,
        http_listener(settings),
        references=(ROUTE_CONFIG_NAME,) + ((SECRET_NAME,) if settings.tls is not None else ()),
    )
