"""The vendored ReferenceGrant CRD is the Gateway API release's, and the Git-side grant
schema (control_plane/model/reference_grants.py) says what that CRD says."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import yaml

from control_plane.model import reference_grants
from control_plane.model.reference_grants import GrantSpec

CRDS = Path(__file__).resolve().parents[3] / "charts" / "gatehouse" / "crds"
CRD = CRDS / "gateway.networking.k8s.io_referencegrants.yaml"


def crd() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(CRD.read_text())
    return loaded


def test_the_vendored_file_is_the_release_the_readme_names() -> None:
    readme = (CRDS / "README.md").read_text()
    digest = hashlib.sha256(CRD.read_bytes()).hexdigest()
    assert f"sha256 `{digest}`" in readme, "run scripts/vendor-gateway-api-crd --check, then fix README.md's sha256"
    version = crd()["metadata"]["annotations"]["gateway.networking.k8s.io/bundle-version"]
    assert f"**{version}**" in readme and f"GATEWAY_API_VERSION={version}\n" in (CRDS.parents[2] / "scripts" / "vendor-gateway-api-crd").read_text()
    assert crd()["metadata"]["annotations"]["gateway.networking.k8s.io/channel"] == "standard"


def test_the_watched_version_is_served_and_stored_and_git_files_may_use_every_served_one() -> None:
    versions = {v["name"]: v for v in crd()["spec"]["versions"]}
    assert versions[reference_grants.VERSION]["served"] and versions[reference_grants.VERSION]["storage"]
    assert sorted(f"{crd()['spec']['group']}/{v}" for v, d in versions.items() if d["served"]) == sorted(reference_grants.API_VERSIONS)
    assert (crd()["spec"]["group"], crd()["spec"]["names"]["kind"], crd()["spec"]["names"]["plural"]) == (
        reference_grants.GROUP, reference_grants.KIND, reference_grants.PLURAL,
    )  # fmt: skip


def test_the_git_schema_mirrors_the_crds_fields_bounds_and_patterns() -> None:
    spec = {v["name"]: v for v in crd()["spec"]["versions"]}[reference_grants.VERSION]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert set(spec["required"]) == {"from", "to"} == {f.alias or name for name, f in GrantSpec.model_fields.items()}
    models = {"from": reference_grants.FromSpec, "to": reference_grants.ToSpec}
    patterns = {"group": reference_grants._GROUP, "kind": reference_grants._KIND, "namespace": reference_grants._NAMESPACE}
    for field, model in models.items():
        items = spec["properties"][field]
        assert (items["minItems"], items["maxItems"]) == (1, 16)
        schema = items["items"]
        assert set(schema["properties"]) == set(model.model_fields), field
        assert set(schema["required"]) == {n for n, f in model.model_fields.items() if f.is_required()}, field
        for name, rule in schema["properties"].items():
            if "pattern" in rule:
                assert patterns[name].pattern == rule["pattern"], (field, name)
    name = spec["properties"]["to"]["items"]["properties"]["name"]
    assert (name["minLength"], name["maxLength"]) == (1, 253) and "pattern" not in name
    # The lengths the validators check by hand.
    assert spec["properties"]["from"]["items"]["properties"]["namespace"]["maxLength"] == 63
    assert spec["properties"]["from"]["items"]["properties"]["kind"]["maxLength"] == 63
    assert spec["properties"]["from"]["items"]["properties"]["group"]["maxLength"] == 253
