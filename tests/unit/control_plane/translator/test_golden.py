"""Translator golden files: what each input route set becomes in Envoy, reviewed as YAML diffs.

    .venv/bin/pytest tests/unit/control_plane/translator/test_golden.py --update-golden

rewrites `testdata/out/` from the current output and deletes expected files that no
input produces any more. Without the flag, any difference fails with a unified diff.
Every case also goes through `envoy --mode validate` (tests/integration/test_envoy_validate.py).
"""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from servicekit.errors import ConfigError
from control_plane.translator import GatewaySettings
from control_plane.translator.settings import ExtAuthzSettings, TlsSettings
from tests.unit.control_plane.translator.golden import (
    KINDS,
    OUT_DIR,
    case_names,
    case_settings,
    expected_path,
    load_settings,
    stale_outputs,
    translate_case,
)

CASES = case_names()
UPDATE_HINT = "if the change is intended, run: .venv/bin/pytest tests/unit/control_plane/translator/test_golden.py --update-golden"


def updating(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


def test_there_are_golden_cases() -> None:
    assert len(CASES) >= 10, CASES


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str, request: pytest.FixtureRequest) -> None:
    result = translate_case(case)
    failures = []
    for kind in result.kinds():
        actual = result.rendered(kind)
        path = expected_path(case, kind)
        if updating(request):
            OUT_DIR.mkdir(parents=True, exist_ok=True)
            if not path.exists() or path.read_text() != actual:
                path.write_text(actual)
            continue
        if not path.exists():
            failures.append(f"{path} is missing")
            continue
        expected = path.read_text()
        if expected != actual:
            diff = difflib.unified_diff(
                expected.splitlines(keepends=True),
                actual.splitlines(keepends=True),
                fromfile=f"expected {path.name}",
                tofile=f"actual {path.name}",
            )
            failures.append("".join(diff))
    if failures:
        pytest.fail("\n".join(failures) + "\n" + UPDATE_HINT, pytrace=False)


def test_golden_translation_is_deterministic() -> None:
    """Two fresh translators give byte-identical resources, so golden files never flap."""
    for case in CASES:
        first, second = translate_case(case), translate_case(case)
        assert first.kinds() == second.kinds(), case
        for kind in first.kinds():
            assert [r.body for r in first.resources(kind)] == [r.body for r in second.resources(kind)], (case, kind)


def test_no_stale_golden_files(request: pytest.FixtureRequest) -> None:
    stale = stale_outputs()
    if updating(request):
        for path in stale:
            path.unlink()
        assert stale_outputs() == []
        return
    assert stale == [], f"expected files without an input: {[p.name for p in stale]}; {UPDATE_HINT}"


# --- the settings side file --------------------------------------------------------------------


def test_cases_without_a_settings_file_use_the_default_gateway() -> None:
    assert case_settings("hosts") == GatewaySettings()
    assert case_settings("ext_authz").ext_authz == ExtAuthzSettings(
        (("127.0.0.1", 9191), ("authz.internal", 9292), ("10.0.0.7", 9393)), 250, False
    )


@pytest.mark.parametrize(
    "text, problem",
    [
        ("gateway: {listenerPrt: 9090}\n", "gateway.listenerPrt: Extra inputs are not permitted"),
        ("sources: {}\n", "sources: Extra inputs are not permitted"),
        ("extAuthz: {address: 127.0.0.1:9191, timeout: 250}\n", "extAuthz.timeout"),
        ("rateLimit: {address: 127.0.0.1:8081, failClosed: yes}\n", "rateLimit.failClosed"),
    ],
)
def test_a_settings_file_is_loaded_strictly(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "case.settings.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=problem):
        load_settings(path)


def test_tls_paths_in_a_settings_file_must_be_absolute(tmp_path: Path) -> None:
    path = tmp_path / "case.settings.yaml"
    path.write_text("gateway: {tls: {certFile: /etc/tls/tls.crt, keyFile: /etc/tls/tls.key}}\n")
    assert load_settings(path).tls == TlsSettings("/etc/tls/tls.crt", "/etc/tls/tls.key")
    path.write_text("gateway: {tls: {certFile: tls.crt, keyFile: /etc/tls/tls.key}}\n")
    with pytest.raises(AssertionError):
        load_settings(path)


def test_only_the_cases_with_secrets_or_policies_have_those_files() -> None:
    assert translate_case("hosts").kinds() == KINDS
    assert translate_case("tls").kinds() == KINDS + ("secrets",)
    assert translate_case("ratelimit").kinds() == KINDS + ("policies",)
