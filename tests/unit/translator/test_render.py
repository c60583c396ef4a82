"""`resource_data`/`to_yaml`: the text form of resources for `gatehouse render`, golden files and diffs."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
import yaml

from control_plane.render import resource_data, to_yaml
from gatehouse.cli import main
from tests.unit.translator.golden import IN_DIR, canonical, expected_path, translate_case

REPO_ROOT = Path(__file__).resolve().parents[3]
RENDER_ONE = """
from control_plane.render import resource_data, to_yaml
from tests.unit.translator.golden import translate_case
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


def test_map_fields_are_rendered_with_sorted_keys() -> None:
    """Struct metadata comes out of upb in per-process hash order; resource_data sorts it.
    Message fields keep their declared order (match before route before metadata)."""
    for case in ("path_kinds", "design_example"):
        [config] = [resource_data(r) for r in translate_case(case).translation.routes]
        for vhost in config["virtual_hosts"]:
            for entry in vhost.get("routes", []):
                assert list(entry["metadata"]["filter_metadata"]["gatehouse"]) == ["origin", "route"]
                assert list(entry)[:1] == ["match"]
    assert canonical(resource_data(translate_case("path_kinds").translation.routes[0])) == resource_data(
        translate_case("path_kinds").translation.routes[0]
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


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """`gatehouse.cli.main` configures structlog for the whole process, writing to the
    sys.stderr of that moment: under capsys, a capture stream that is closed after the
    test. Later tests that log (the translator warns about unenforced fields) would then
    fail with "I/O operation on closed file", so the previous configuration is put back."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


@pytest.mark.parametrize("case", ["path_kinds", "retries", "weighted_backends", "design_example"])
@pytest.mark.usefixtures("restore_logging")
def test_gatehouse_render_prints_what_the_golden_files_hold(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`gatehouse render DIR --endpoints FILE` runs the same pipeline as the golden test."""
    routes_dir = tmp_path / "routes"
    routes_dir.mkdir()
    (routes_dir / f"{case}.yaml").write_bytes((IN_DIR / f"{case}.yaml").read_bytes())
    argv = ["render", str(routes_dir)]
    side_file = IN_DIR / f"{case}.endpoints.yaml"
    if side_file.exists():
        argv += ["--endpoints", str(side_file)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    rendered = yaml.safe_load(captured.out)
    by_short = {"LDS": "listeners", "RDS": "routes", "CDS": "clusters", "EDS": "endpoints"}
    assert set(rendered) == set(by_short)
    for short, kind in by_short.items():
        expected = yaml.safe_load(expected_path(case, kind).read_text())
        assert canonical(rendered[short]) == expected, kind


def test_gatehouse_render_stdout_is_only_yaml_even_with_warnings(tmp_path: Path) -> None:
    """The translator warns about fields it does not enforce yet (design_example has auth);
    those log lines went to stdout and broke `gatehouse render > out.yaml`. They go to stderr."""
    routes_dir = tmp_path / "routes"
    routes_dir.mkdir()
    (routes_dir / "design_example.yaml").write_bytes((IN_DIR / "design_example.yaml").read_bytes())
    result = subprocess.run(
        [sys.executable, "-m", "gatehouse", "render", str(routes_dir)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "route_field_not_enforced" not in result.stdout
    assert set(yaml.safe_load(result.stdout)) == {"LDS", "RDS", "CDS", "EDS"}
    assert "route_field_not_enforced" in result.stderr, "the warning is still shown, on stderr"
