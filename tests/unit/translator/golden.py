"""Golden cases for the translator: `testdata/in/<case>.yaml` → `testdata/out/<case>.<kind>.yaml`.

An input is a stream of route documents, loaded strictly (any problem fails the case).
An optional side file `in/<case>.endpoints.yaml` is a static endpoints file; without
one, every cluster gets an empty ClusterLoadAssignment. Shared with
tests/integration/test_envoy_validate.py, which feeds the same cases to Envoy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from control_plane.cache.resource import Resource
from control_plane.model import Origin, duplicate_problems, parse_route_file
from control_plane.render import resource_data, to_yaml
from control_plane.sources.static_endpoints import StaticEndpointTable, parse_endpoints
from control_plane.translator import EndpointTranslator, GatewaySettings, RouteTranslator, Translation

TESTDATA = Path(__file__).parent / "testdata"
IN_DIR = TESTDATA / "in"
OUT_DIR = TESTDATA / "out"
KINDS = ("listeners", "routes", "clusters", "endpoints")
ENDPOINTS_SUFFIX = ".endpoints.yaml"
# Protobuf map fields (Struct metadata): resource_data() emits their keys in upb's hash
# order, which changes from process to process (see test_render.py). Golden files sort
# the keys below these fields, and keep every message's own field order.
MAP_FIELDS = frozenset({"filter_metadata", "typed_filter_metadata", "json_format"})


def canonical(value: Any, in_map: bool = False) -> Any:
    if isinstance(value, dict):
        items = sorted(value.items()) if in_map else list(value.items())
        return {key: canonical(item, in_map or key in MAP_FIELDS) for key, item in items}
    if isinstance(value, list):
        return [canonical(item, in_map) for item in value]
    return value


def case_names() -> list[str]:
    return sorted(
        path.name[: -len(".yaml")]
        for path in IN_DIR.glob("*.yaml")
        if not path.name.endswith(ENDPOINTS_SUFFIX)
    )


def expected_path(case: str, kind: str) -> Path:
    return OUT_DIR / f"{case}.{kind}.yaml"


@dataclass(frozen=True)
class CaseResult:
    translation: Translation
    endpoints: tuple[Resource, ...]

    def resources(self, kind: str) -> tuple[Resource, ...]:
        by_kind = {
            "listeners": self.translation.listeners,
            "routes": self.translation.routes,
            "clusters": self.translation.clusters,
            "endpoints": self.endpoints,
        }
        return by_kind[kind]

    def data(self, kind: str) -> list[dict[str, Any]]:
        return [canonical(resource_data(resource)) for resource in self.resources(kind)]

    def rendered(self, kind: str) -> str:
        return to_yaml(self.data(kind))


def translate_case(case: str) -> CaseResult:
    source = IN_DIR / f"{case}.yaml"
    routes, problems = parse_route_file(source.read_bytes(), Origin("file", source.name))
    problems += duplicate_problems(routes)
    if problems:
        lines = "\n".join(f"  {p}" for p in problems)
        raise AssertionError(f"golden input {source} is invalid:\n{lines}")
    side_file = IN_DIR / f"{case}{ENDPOINTS_SUFFIX}"
    table = (
        parse_endpoints(side_file.read_bytes(), side_file.name) if side_file.exists() else StaticEndpointTable({})
    )
    translation = RouteTranslator(GatewaySettings()).translate(routes)
    endpoints = EndpointTranslator().translate(translation.cluster_refs, table)
    return CaseResult(translation, tuple(endpoints))


def stale_outputs() -> list[Path]:
    """Expected files whose case has no input (or whose kind is unknown)."""
    wanted = {expected_path(case, kind) for case in case_names() for kind in KINDS}
    return sorted(path for path in OUT_DIR.glob("*") if path.is_file() and path not in wanted)
