"""`resource_data`/`to_yaml`: the text form of resources for `gatehouse render`, golden files and diffs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from control_plane.render import MAP_FIELDS, canonical, resource_data, to_yaml
from gatehouse.cli import main
from tests.unit.control_plane.translator.golden import IN_DIR, translate_case

REPO_ROOT = Path(__file__).resolve().parents[4]
RENDER_ONE = """
from control_plane.render import resource_data, to_yaml
from tests.unit.control_plane.translator.golden import translate_case
print(to_yaml(resource_data(translate_case("disabled").translation.routes[0])))
"""


def test_resource_data_round_trips_through_yaml() -> None:
    result = translate_case("design_example")
    for resource in result.translation.routes + result.translation.clusters + result.translation.listeners:
        data = resource_data(resource)
        assert yaml.safe_load(to_yaml(data)) == data


def test_resource_data_uses_envoy_field_names() -> None:
    data = resource_data(translate_case("retries").translation.routes[0])
    route = data["virtual_hosts"][0]["routes"][0]
    assert "retry_policy" in route["route"] and "retryPolicy" not in route["route"]


def scrambled(value: Any, in_map: bool = False) -> Any:
    """``value`` with every dict at or below a map field in reverse key order, as upb's hash
    order may emit it; message dicts keep their order."""
    if isinstance(value, dict):
        items = list(value.items())[::-1] if in_map else list(value.items())
        return {k: scrambled(v, in_map or k in MAP_FIELDS) for k, v in items}
    if isinstance(value, list):
        return [scrambled(v, in_map) for v in value]
    return value


def order(value: Any) -> str:
    """Key order matters here: dict == dict would not see it."""
    return json.dumps(value)


def test_map_fields_are_rendered_with_sorted_keys() -> None:
    """Struct metadata comes out of upb in per-process hash order; resource_data sorts it.
    Message fields keep their declared order (match before route before metadata)."""
    for case in ("path_kinds", "design_example"):
        [config] = [resource_data(r) for r in translate_case(case).translation.routes]
        for vhost in config["virtual_hosts"]:
            for entry in vhost.get("routes", []):
                assert list(entry["metadata"]["filter_metadata"]["gatehouse"]) == ["origin", "route"]
                assert list(entry)[:1] == ["match"]
                if "route" in entry:  # sorted, metadata would come before route
                    assert list(entry)[:3] == ["match", "route", "metadata"], "message order"
    [listener] = translate_case("ext_authz").data("listeners")
    assert list(listener) == ["name", "address", "filter_chains"], "message order, not sorted"
    # Whatever order the maps arrive in, the render is the same text.
    for case in ("path_kinds", "ext_authz", "route_shields"):
        for kind in ("listeners", "routes"):
            for data in translate_case(case).data(kind):
                shuffled = scrambled(data)
                assert order(canonical(shuffled)) == order(data), (case, kind)
    assert order(scrambled(config)) != order(config), "the scramble reorders something"


def test_canonical_sorts_below_map_fields_only() -> None:
    value = {
        "name": "n",
        "metadata": {"filter_metadata": {"z": {"y": 1, "x": [{"d": 1, "c": 2}]}, "a": {"b": 0}}},
        "typed_per_filter_config": {"f2": {"@type": "t", "b": 1, "a": 2}, "f1": {}},
        "match": {"prefix": "/", "headers": [{"name": "h", "exact": "v"}]},
    }
    assert order(canonical(value)) == order(
        {
            "name": "n",
            "metadata": {"filter_metadata": {"a": {"b": 0}, "z": {"x": [{"c": 2, "d": 1}], "y": 1}}},
            "typed_per_filter_config": {"f1": {}, "f2": {"@type": "t", "a": 2, "b": 1}},
            "match": {"prefix": "/", "headers": [{"name": "h", "exact": "v"}]},
        }
    )


def test_rendering_is_the_same_in_every_process() -> None:
    """Sixteen processes render the same resource; with two metadata keys in hash order,
    the chance that all of them agree by luck is about 2 * 0.5**16 (this flapped before
    resource_data sorted map keys)."""
    processes = [
        subprocess.Popen([sys.executable, "-c", RENDER_ONE], cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(16)
    ]
    outputs = set()
    for process in processes:
        stdout, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, stderr
        outputs.add(stdout)
    assert len(outputs) == 1, "\n=====\n".join(sorted(outputs))


@pytest.mark.parametrize("case", ["path_kinds", "retries", "weighted_backends", "design_example"])
@pytest.mark.usefixtures("restore_logging")
def test_gatehouse_render_prints_what_the_golden_test_checks(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`gatehouse render DIR --endpoints FILE` runs the same pipeline and renderer as the golden
    test: the same text, byte for byte, as the golden test renders (and pins in its files;
    listeners there as a delta from the shared listener)."""
    routes_dir = tmp_path / "routes"
    routes_dir.mkdir()
    (routes_dir / f"{case}.yaml").write_bytes((IN_DIR / f"{case}.yaml").read_bytes())
    argv = ["render", str(routes_dir)]
    settings = IN_DIR / f"{case}.settings.yaml"
    if settings.exists():
        config = tmp_path / "control-plane.yaml"
        config.write_text(settings.read_text() + "sources: {}\n")
        argv += ["--config", str(config)]
    side_file = IN_DIR / f"{case}.endpoints.yaml"
    if side_file.exists():
        argv += ["--endpoints", str(side_file)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    rendered = yaml.safe_load(captured.out)
    by_short = {"LDS": "listeners", "RDS": "routes", "CDS": "clusters", "EDS": "endpoints"}
    assert set(rendered) == set(by_short)
    expected = translate_case(case)
    for short, kind in by_short.items():
        assert to_yaml(rendered[short]) == expected.rendered(kind), kind


def test_gatehouse_render_stdout_is_only_yaml_even_with_warnings(tmp_path: Path) -> None:
    """The translator names the routes it refuses (design_example asks for auth, and this
    gateway has no check); such lines went to stdout once and broke `gatehouse render >
    out.yaml`. They go to stderr."""
    routes_dir = tmp_path / "routes"
    routes_dir.mkdir()
    (routes_dir / "design_example.yaml").write_bytes((IN_DIR / "design_example.yaml").read_bytes())
    result = subprocess.run(
        [sys.executable, "-m", "gatehouse", "render", str(routes_dir)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "route_refused" not in result.stdout and "route: shop/orders\n" not in result.stdout
    assert set(yaml.safe_load(result.stdout)) == {"LDS", "RDS", "CDS", "EDS"}
    assert "refused: file:design_example.yaml:3: shop/orders: auth: the route requires a token" in result.stderr
