"""The chart's CRD is generated from the route schema and stays in step with it."""

from __future__ import annotations

from pathlib import Path
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
