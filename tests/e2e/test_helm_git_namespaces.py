"""The chart's ``controlPlane.git.namespaces`` and ``namespacesByPath`` reach the control
plane's config (issue 33, item 2); left unset, the config has no list (only ``default``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from control_plane.config import load_config
from tests.e2e.test_helm_chart import CONTROL_PLANE, find, helm_home, objects, run_helm, template, tools  # noqa: F401 - fixtures
from tests.e2e.test_helm_chart import CHART, NAMESPACE, RELEASE
from tests.harness.kubernetes import KubeTools

GIT = ["--set", "controlPlane.git.enabled=true,controlPlane.git.repo=https://git.example.com/routes.git"]


def rendered_git(tools: KubeTools, home: Path, tmp_path: Path, *values: str) -> object:  # noqa: F811
    config_map = find(objects(template(tools, home, *GIT, *values)), "ConfigMap", CONTROL_PLANE)
    path = tmp_path / "control-plane.yaml"
    path.write_text(config_map["data"]["control-plane.yaml"])
    (git,) = load_config(path).sources.git
    return git


def test_the_git_binding_reaches_the_control_plane_config(tools: KubeTools, helm_home: Path, tmp_path: Path) -> None:  # noqa: F811
    git = rendered_git(tools, helm_home, tmp_path, "--set", "controlPlane.git.namespaces={shop,payments}",
                       "--set-json", 'controlPlane.git.namespacesByPath={"teams/payments":["payments"]}')
    assert git.namespaces == ["shop", "payments"] and git.namespaces_by_path == {"teams/payments": ["payments"]}  # type: ignore[attr-defined]
    unset = rendered_git(tools, helm_home, tmp_path)
    assert unset.namespaces is None and unset.namespaces_by_path == {}, "unset: the control plane's default (only 'default')"  # type: ignore[attr-defined]
    none = rendered_git(tools, helm_home, tmp_path, "--set-json", "controlPlane.git.namespaces=[]")
    assert none.namespaces == [], "[] is kept: it claims nothing"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["--set", "controlPlane.git.namespaces={Shop}"], "at '/controlPlane/git/namespaces/0': 'Shop' does not match pattern"),
        (["--set-json", 'controlPlane.git.namespacesByPath={"/abs":["shop"]}'], "invalid propertyName '/abs'"),
    ],
)
def test_a_bad_binding_is_refused_by_the_chart_schema(tools: KubeTools, helm_home: Path, values: list[str], message: str) -> None:  # noqa: F811
    result = run_helm(tools, helm_home, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *GIT, *values, check=False)
    assert result.returncode != 0 and message in result.stderr, result.stderr
