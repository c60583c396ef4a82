"""The `routes.gatehouse.io` CustomResourceDefinition, generated from the route schema.

pydantic's JSON schema is turned into a Kubernetes *structural* schema: references are
inlined, optional fields lose their `null` branch, titles and defaults go (defaults are
applied by the Python model, so what is stored is what the user wrote), and the CEL rules
declared next to each model's Python validator ride along as
``x-kubernetes-validations``. `charts/gatehouse/crds/` holds the output of
``gatehouse crd``; a test keeps the two identical.
"""

from __future__ import annotations

import copy
from typing import Any

from control_plane.model.schema import RouteSpec

GROUP = "gatehouse.io"
VERSION = "v1alpha1"
PLURAL = "routes"
NAME = f"{PLURAL}.{GROUP}"

# propertyNames is not part of Kubernetes' OpenAPI subset; header-name keys are checked
# by the Python model (Accepted=False) instead.
_DROP = {"title", "default", "additionalProperties", "propertyNames"}


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_structural(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**copy.deepcopy(target), **{k: v for k, v in node.items() if k != "$ref"}}
        return _structural(merged, defs)
    if "anyOf" in node:
        branches = [b for b in node["anyOf"] if b != {"type": "null"}]
        if len(branches) == 1:
            rest = {k: v for k, v in node.items() if k != "anyOf"}
            return _structural({**branches[0], **rest}, defs)
    if "patternProperties" in node:
        # Kubernetes has no patternProperties: keep the value schema, the keys are checked in Python.
        values = list(node["patternProperties"].values())
        node = {k: v for k, v in node.items() if k != "patternProperties"}
        node["additionalProperties"] = values[0] if values else {"type": "string"}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP and not (key == "additionalProperties" and isinstance(value, dict)):
            continue
        if key == "properties":
            out[key] = {name: _structural(prop, defs) for name, prop in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = _structural(value, defs)
        elif key == "x-kubernetes-validations":
            out[key] = value
        elif key == "const":
            # JSONSchemaProps has no const (the API server refuses the CRD): a one-value enum.
            out["enum"] = [value]
        else:
            out[key] = _structural(value, defs)
    return out


def spec_schema() -> dict[str, Any]:
    raw = RouteSpec.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    schema: dict[str, Any] = _structural(raw, defs)
    return schema


def _condition_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["type", "status", "lastTransitionTime", "reason", "message"],
        "properties": {
            "type": {"type": "string", "maxLength": 316},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "observedGeneration": {"type": "integer", "minimum": 0},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
            "reason": {"type": "string", "maxLength": 1024},
            "message": {"type": "string", "maxLength": 32768},
        },
    }


def status_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "Written by the control plane's leader: acceptance, rejection reasons and Envoy NACKs.",
        "properties": {
            "observedGeneration": {"type": "integer", "minimum": 0},
            "conditions": {
                "type": "array",
                "maxItems": 8,
                "items": _condition_schema(),
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
        },
    }


def custom_resource_definition() -> dict[str, Any]:
    condition = '.status.conditions[?(@.type=="{}")].status'
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": NAME, "labels": {"app.kubernetes.io/part-of": "gatehouse"}},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": "Route",
                "listKind": "RouteList",
                "plural": PLURAL,
                "singular": "route",
                "shortNames": ["gr"],
                "categories": ["gatehouse"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Hosts", "type": "string", "jsonPath": ".spec.hosts"},
                        {"name": "Path", "type": "string", "jsonPath": ".spec.match.path"},
                        {"name": "Prefix", "type": "string", "jsonPath": ".spec.match.pathPrefix"},
                        {"name": "Accepted", "type": "string", "jsonPath": condition.format("Accepted")},
                        {"name": "Programmed", "type": "string", "jsonPath": condition.format("Programmed")},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A Gatehouse route: which requests go where, and how.",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema(),
                                "status": status_schema(),
                            },
                        }
                    },
                }
            ],
        },
    }
