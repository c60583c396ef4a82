"""Translator golden files: what each input route set becomes in Envoy, reviewed as YAML diffs.

    .venv/bin/pytest tests/unit/control_plane/translator/test_golden.py --update-golden

rewrites `testdata/out/` from the current output and deletes expected files that no
input produces any more. Without the flag, any difference fails with a unified diff.
Every case also goes through `envoy --mode validate` (tests/integration/test_envoy_validate.py).

Listeners: `_shared.listeners.yaml` holds the default gateway's listener in full
(test_shared_golden), each `<case>.listeners.yaml` the case's listener as a delta from the
translator's current shared listener (golden_delta.py). Both pass only if the case's whole
listener is the one the two files describe: the delta is checked to expand back to it, so
a change to the shared chain fails the shared file alone and a change to one case's
listener that case alone.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from servicekit.errors import ConfigError
from control_plane.translator import GatewaySettings
from control_plane.translator.settings import ExtAuthzSettings, TlsSettings
from tests.unit.control_plane.translator.golden import (
    DELTA_KINDS,
    KINDS,
    OUT_DIR,
    SHARED,
    CaseResult,
    case_names,
    case_settings,
    expected_path,
    load_settings,
    shared_result,
    stale_outputs,
    translate_case,
)
from tests.unit.control_plane.translator.golden_delta import delta, expand

CASES = case_names()
UPDATE_HINT = "if the change is intended, run: .venv/bin/pytest tests/unit/control_plane/translator/test_golden.py --update-golden"


def updating(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


def test_there_are_golden_cases() -> None:
    assert len(CASES) >= 10, CASES


@pytest.fixture(scope="module")
def shared() -> CaseResult:
    return shared_result()


def compare(path: Path, actual: str, request: pytest.FixtureRequest) -> str | None:
    """None if ``path`` holds ``actual`` (written first with --update-golden), else why not."""
    if updating(request):
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != actual:
            path.write_text(actual)
        return None
    if not path.exists():
        return f"{path} is missing"
    expected = path.read_text()
    if expected == actual:
        return None
    diff = difflib.unified_diff(
        expected.splitlines(keepends=True),
        actual.splitlines(keepends=True),
        fromfile=f"expected {path.name}",
        tofile=f"actual {path.name}",
    )
    return "".join(diff)


def fail_if(failures: list[str | None]) -> None:
    found = [f for f in failures if f is not None]
    if found:
        pytest.fail("\n".join(found) + "\n" + UPDATE_HINT, pytrace=False)


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str, shared: CaseResult, request: pytest.FixtureRequest) -> None:
    result = translate_case(case)
    for kind in DELTA_KINDS:
        written = delta(result.data(kind), shared.data(kind))
        assert expand(written, shared.data(kind)) == result.data(kind), f"{case}.{kind}: the delta does not give the output back"
    fail_if([compare(expected_path(case, kind), result.golden(kind, shared), request) for kind in result.kinds()])


def test_shared_golden(shared: CaseResult, request: pytest.FixtureRequest) -> None:
    """What every case's delta is written against: the default gateway's listener, in full."""
    fail_if([compare(expected_path(SHARED, kind), shared.rendered(kind), request) for kind in DELTA_KINDS])


def test_a_case_without_settings_has_the_shared_listener(shared: CaseResult) -> None:
    """The chain does not depend on the routes: a case with the default settings writes
    its listener as the shared one, in one line."""
    assert case_settings("hosts") == GatewaySettings()
    assert translate_case("hosts").data("listeners") == shared.data("listeners")
    assert expected_path("hosts", "listeners").read_text().splitlines()[1:] == ["- $shared: gatehouse_http"]


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
