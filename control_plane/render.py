"""Resources → plain data (Envoy's JSON, snake_case field names) for `gatehouse render`,
golden files and status diffs."""

from __future__ import annotations

import json
from typing import Any

import yaml
from google.protobuf import json_format

from control_plane.cache.resource import Resource
from control_plane.cache.types import ResourceType
from control_plane.translator.messages import Cluster, ClusterLoadAssignment, Listener, RouteConfiguration

_MESSAGES = {
    ResourceType.CLUSTER: Cluster,
    ResourceType.ENDPOINT: ClusterLoadAssignment,
    ResourceType.LISTENER: Listener,
    ResourceType.ROUTE: RouteConfiguration,
}


def resource_data(resource: Resource) -> dict[str, Any]:
    message = _MESSAGES[resource.type].FromString(resource.body)
    text = json_format.MessageToJson(message, preserving_proto_field_name=True, indent=None)
    data: dict[str, Any] = json.loads(text)
    return data


def to_yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=100)
