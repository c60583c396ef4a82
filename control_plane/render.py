"""Resources → plain data (Envoy's JSON, snake_case field names): the one text form of
resources, for `gatehouse render`, the translator's golden files, /config and status diffs."""

from __future__ import annotations

import json
from typing import Any

import yaml
from google.protobuf import json_format

from control_plane.cache.resource import Resource
from control_plane.cache.types import ResourceType
from control_plane.translator.messages import Cluster, ClusterLoadAssignment, Listener, RouteConfiguration, Secret
from servicekit.protos.gatehouse.policy.v1 import policy_pb2

_MESSAGES = {
    ResourceType.CLUSTER: Cluster,
    ResourceType.ENDPOINT: ClusterLoadAssignment,
    ResourceType.SECRET: Secret,
    ResourceType.LISTENER: Listener,
    ResourceType.ROUTE: RouteConfiguration,
    ResourceType.POLICY: policy_pb2.RoutePolicy,
}


def resource_data(resource: Resource) -> dict[str, Any]:
    message = _MESSAGES[resource.type].FromString(resource.body)
    text = json_format.MessageToJson(message, preserving_proto_field_name=True, indent=None)
    data: dict[str, Any] = canonical(json.loads(text))
    return data


MAP_FIELDS = frozenset({"filter_metadata", "typed_filter_metadata", "typed_per_filter_config", "json_format"})
"""Protobuf map and Struct fields: upb emits their keys in hash order, which changes from
process to process."""


def canonical(value: Any, in_map: bool = False) -> Any:
    """``value`` with the keys of every dict at or below a map field sorted, so renders and
    golden files are stable; every other dict keeps its order (a message's declared field
    order: match before route before metadata)."""
    if isinstance(value, dict):
        items = sorted(value.items()) if in_map else value.items()
        return {k: canonical(v, in_map or k in MAP_FIELDS) for k, v in items}
    if isinstance(value, list):
        return [canonical(v, in_map) for v in value]
    return value


def to_yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=100)
