"""The chart's CRD is generated from the route schema and stays in step with it."""

from __future__ import annotations

from pathlib import Path
from collections.abc import Iterator
from typing import Any

import yaml

from control_plane.model.schema import RouteSpec
from gatehouse.commands.crd import render_crd

CHART_CRD = Path(__file__).resolve().parents[3] / "charts" / "gatehouse" / "crds" / "routes.gatehouse.io.yaml"


def test_the_chart_crd_is_what_the_schema_generates() -> None:
    assert CHART_CRD.read_text() == render_crd(), "run: .venv/bin/gatehouse crd > charts/gatehouse/crds/routes.gatehouse.io.yaml"


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, node)]
    for name, child in (node.get("properties") or {}).items():
        out += _walk(child, f"{path}.{name}")
    if "items" in node:
        out += _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        out += _walk(node["additionalProperties"], f"{path}{{}}")
    return out


def test_the_schema_is_structural_and_covers_every_model_field() -> None:
    crd = yaml.safe_load(render_crd())
    version = crd["spec"]["versions"][0]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    for path, node in _walk(spec, "spec"):
        assert "$ref" not in node and "anyOf" not in node, path
        assert "type" in node, f"{path} has no type"
        assert not ("properties" in node and "additionalProperties" in node), path
        assert "default" not in node, path

    def fields(model: Any, prefix: str) -> set[str]:
        names = set()
        for field in model.model_fields.values():
            alias = field.alias or ""
            names.add(f"{prefix}.{alias}")
        return names

    crd_paths = {path for path, _ in _walk(spec, "spec")}
    assert fields(RouteSpec, "spec") <= crd_paths
    assert {"spec.match.path", "spec.backends[].weight", "spec.timeouts.perTry", "spec.retries.retryOn[]"} <= crd_paths


# The fields of apiextensions.k8s.io/v1 JSONSchemaProps: the API server refuses a CRD
# whose schema has any other key (strict decoding), e.g. pydantic's `const`.
_JSON_SCHEMA_PROPS = {
    "id", "$schema", "$ref", "description", "type", "format", "title", "default", "maximum",
    "exclusiveMaximum", "minimum", "exclusiveMinimum", "maxLength", "minLength", "pattern",
    "maxItems", "minItems", "uniqueItems", "multipleOf", "enum", "maxProperties",
    "minProperties", "required", "items", "allOf", "oneOf", "anyOf", "not", "properties",
    "additionalProperties", "patternProperties", "dependencies", "additionalItems",
    "definitions", "externalDocs", "example", "nullable", "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource", "x-kubernetes-int-or-string", "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type", "x-kubernetes-map-type", "x-kubernetes-validations",
}


def _schema_nodes(node: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from _schema_nodes(child, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            yield from _schema_nodes(node[key], f"{path}.{key}")
    for key in ("allOf", "oneOf", "anyOf"):
        for n, child in enumerate(node.get(key, [])):
            yield from _schema_nodes(child, f"{path}.{key}[{n}]")


def test_every_schema_key_is_a_kubernetes_json_schema_props_field() -> None:
    crd = yaml.safe_load(render_crd())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _schema_nodes(schema, "openAPIV3Schema"):
        unknown = set(node) - _JSON_SCHEMA_PROPS
        assert not unknown, f"{path}: {sorted(unknown)} are not JSONSchemaProps fields"
    circuit_open = schema["properties"]["spec"]["properties"]["fallback"]["properties"]["circuitOpen"]
    assert circuit_open == {"type": "boolean", "enum": [True]} | {k: v for k, v in circuit_open.items() if k == "description"}


def test_the_crd_has_status_printer_columns_short_name_and_cel_rules() -> None:
    crd = yaml.safe_load(render_crd())
    assert crd["metadata"]["name"] == "routes.gatehouse.io"
    assert crd["spec"]["names"]["shortNames"] == ["gr"]
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == ["Hosts", "Path", "Prefix", "Accepted", "Programmed", "Age"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = [r["rule"] for r in spec["x-kubernetes-validations"]]
    assert any("size(self.backends) > 0" in r for r in rules)
    assert "duration(self.perTry) <= duration(self.request)" in spec["properties"]["timeouts"]["x-kubernetes-validations"][0]["rule"]
    assert spec["properties"]["backends"]["items"]["properties"]["weight"]["minimum"] == 0
