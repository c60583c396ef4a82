"""Minimal but valid ServiceMonitor and PodMonitor CRDs (monitoring.coreos.com/v1).

Not the Prometheus Operator's full schemas: the fields the chart uses, with the operator's
names and types, structural (so the API server prunes nothing it should keep and refuses
unknown fields on server-side apply), and strict where a mistake would make the operator
scrape nothing: an endpoint needs a `port` that is a port *name* (the operator resolves
names; a number here is a different field, `targetPort`), paths start with "/", durations
are Prometheus durations, a relabeling uses the operator's camelCase keys.
"""

from __future__ import annotations

import copy
from typing import Any

DURATION_PATTERN = "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
# IANA_SVC_NAME, what Kubernetes allows as a Service or container port name.
PORT_NAME_PATTERN = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"

STRING_MAP: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}
LABEL_SELECTOR: dict[str, Any] = {
    "type": "object",
    "properties": {
        "matchLabels": STRING_MAP,
        "matchExpressions": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["key", "operator"],
                "properties": {
                    "key": {"type": "string"},
                    "operator": {"type": "string", "enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                    "values": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
    },
    "x-kubernetes-map-type": "atomic",
}
RELABEL_CONFIG: dict[str, Any] = {
    "type": "object",
    "properties": {
        "sourceLabels": {"type": "array", "items": {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"}},
        "separator": {"type": "string"},
        "targetLabel": {"type": "string"},
        "regex": {"type": "string"},
        "modulus": {"type": "integer", "format": "int64"},
        "replacement": {"type": "string"},
        "action": {
            "type": "string",
            "enum": ["replace", "Replace", "keep", "Keep", "drop", "Drop", "hashmod", "HashMod", "labelmap", "LabelMap",
                     "labeldrop", "LabelDrop", "labelkeep", "LabelKeep", "lowercase", "Lowercase", "uppercase", "Uppercase",
                     "keepequal", "KeepEqual", "dropequal", "DropEqual"],
        },
    },
}  # fmt: skip
ENDPOINT: dict[str, Any] = {
    "type": "object",
    "required": ["port"],
    "properties": {
        "port": {"type": "string", "pattern": PORT_NAME_PATTERN, "maxLength": 15},
        "path": {"type": "string", "pattern": "^/"},
        "scheme": {"type": "string", "enum": ["http", "https"]},
        "interval": {"type": "string", "pattern": DURATION_PATTERN},
        "scrapeTimeout": {"type": "string", "pattern": DURATION_PATTERN},
        "honorLabels": {"type": "boolean"},
        "relabelings": {"type": "array", "items": RELABEL_CONFIG},
        "metricRelabelings": {"type": "array", "items": RELABEL_CONFIG},
    },
}


def monitor_crd(*, kind: str, plural: str, endpoints_field: str) -> dict[str, Any]:
    spec = {
        "type": "object",
        "required": ["selector", endpoints_field],
        "properties": {
            "jobLabel": {"type": "string"},
            "namespaceSelector": {
                "type": "object",
                "properties": {"any": {"type": "boolean"}, "matchNames": {"type": "array", "items": {"type": "string"}}},
            },
            "selector": LABEL_SELECTOR,
            endpoints_field: {"type": "array", "minItems": 1, "items": copy.deepcopy(ENDPOINT)},
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "required": ["spec"],
                    "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"}, "spec": spec},
                }},
            }],
        },
    }  # fmt: skip


SERVICE_MONITOR_CRD = monitor_crd(kind="ServiceMonitor", plural="servicemonitors", endpoints_field="endpoints")
POD_MONITOR_CRD = monitor_crd(kind="PodMonitor", plural="podmonitors", endpoints_field="podMetricsEndpoints")
