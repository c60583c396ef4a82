"""Resources → plain data (Envoy's JSON, snake_case field names) for `gatehouse render`,
golden files and status diffs."""

from __future__ import annotations

import json
from typing import Any

import yaml
from google.protobuf import json_format

from control_plane.cache.resource import Resource
from control_plane.cache.types import ResourceType
from control_plane.translator.messages import Cluster, ClusterLoadAssignment, Listener, RouteConfiguration, Secret
from servicekit.protos.gatehouse.ratelimit.v1 import policy_pb2

_MESSAGES = {
    ResourceType.CLUSTER: Cluster,
    ResourceType.ENDPOINT: ClusterLoadAssignment,
    ResourceType.SECRET: Secret,
    ResourceType.LISTENER: Listener,
    ResourceType.ROUTE: RouteConfiguration,
    ResourceType.RATELIMIT: policy_pb2.RoutePolicy,
}


def resource_data(resource: Resource) -> dict[str, Any]:
    message = _MESSAGES[resource.type].FromString(resource.body)
    text = json_format.MessageToJson(message, preserving_proto_field_name=True, indent=None)
    data: dict[str, Any] = _sorted_maps(json.loads(text))
    return data


def _sorted_maps(value: Any, in_map: bool = False) -> Any:
    """Protobuf map and Struct fields (metadata) come out in hash order; sort them so that
    renders and golden files are stable. Message fields keep their declared order."""
    if isinstance(value, dict):
        items = sorted(value.items()) if in_map else value.items()
        return {k: _sorted_maps(v, in_map=k in _MAP_FIELDS or (in_map and isinstance(v, dict))) for k, v in items}
    if isinstance(value, list):
        return [_sorted_maps(v) for v in value]
    return value


_MAP_FIELDS = {"filter_metadata", "typed_filter_metadata", "typed_per_filter_config", "json_format"}


def to_yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=100)
