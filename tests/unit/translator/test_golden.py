"""Translator golden files: what each input route set becomes in Envoy, reviewed as YAML diffs.

    .venv/bin/pytest tests/unit/translator/test_golden.py --update-golden

rewrites `testdata/out/` from the current output and deletes expected files that no
input produces any more. Without the flag, any difference fails with a unified diff.
"""

from __future__ import annotations

import difflib

import pytest

from tests.unit.translator.golden import KINDS, OUT_DIR, case_names, expected_path, stale_outputs, translate_case

CASES = case_names()
UPDATE_HINT = "if the change is intended, run: .venv/bin/pytest tests/unit/translator/test_golden.py --update-golden"


def updating(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


def test_there_are_golden_cases() -> None:
    assert len(CASES) >= 10, CASES


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str, request: pytest.FixtureRequest) -> None:
    result = translate_case(case)
    failures = []
    for kind in KINDS:
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
        for kind in KINDS:
            assert [r.body for r in first.resources(kind)] == [r.body for r in second.resources(kind)], (case, kind)


def test_no_stale_golden_files(request: pytest.FixtureRequest) -> None:
    stale = stale_outputs()
    if updating(request):
        for path in stale:
            path.unlink()
        assert stale_outputs() == []
        return
    assert stale == [], f"expected files without an input: {[p.name for p in stale]}; {UPDATE_HINT}"
