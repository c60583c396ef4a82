"""``auth.apiKeys``, ``auth.jwt`` and ``auth.consumers`` in a route file: each bad value named
by file, line, field and reason, as the control plane and ``gatehouse validate`` report it."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from control_plane.model import Origin, parse_route_file
from control_plane.model.api_keys import CONSUMER_PATTERN
from servicekit.api_key_store import CONSUMER
from gatehouse.commands import apikey, validate
from tests.unit.control_plane.model.test_schema_errors import FILE, route

CASES = {
    "apiKeys not a boolean": ("  auth: {apiKeys: yes please}", f"{FILE}:7: spec.auth.apiKeys: Input should be a valid boolean"),
    "jwt off and no keys": ("  auth: {jwt: false}", "auth.jwt: false leaves no way in; set auth.apiKeys: true"),
    "keys on a public route": ("  auth: {required: false, apiKeys: true}", "auth: a public route (auth.required: false) reads no credential"),
    "consumers without keys": ("  auth: {consumers: {allow: [partner-a]}}", "auth.consumers: lists API-key consumers; set auth.apiKeys: true"),
    "scopes with keys only": (
        "  auth: {apiKeys: true, jwt: false, scopes: [orders:read]}",
        "auth.scopes: applies to tokens, and auth.jwt is false (API keys carry none)",
    ),
    "empty consumer lists": ("  auth: {apiKeys: true, consumers: {}}", f"{FILE}:7: spec.auth.consumers: list consumers in allow or deny"),
    "allowed and denied": (
        "  auth: {apiKeys: true, consumers: {allow: [partner-a], deny: [partner-a]}}",
        "spec.auth.consumers: partner-a is both allowed and denied",
    ),
    "a consumer name with capitals": (
        "  auth: {apiKeys: true, consumers: {allow: [Partner-A]}}",
        f"{FILE}:7: spec.auth.consumers.allow[0]: String should match pattern",
    ),
    "unknown consumers field": (
        "  auth: {apiKeys: true, consumers: {only: [partner-a]}}",
        f"{FILE}:7: spec.auth.consumers.only: unknown field",
    ),
    "keys with token swap": (
        "  auth: {apiKeys: true, upstreamToken: {audience: legacy}}",
        "auth.upstreamToken: swaps a verified token for the upstream's own, and an API-key request has none",
    ),
    "an apiKey limit on a key route": (
        "  auth: {apiKeys: true}\n  rateLimits: [{key: apiKey, limit: 5, window: 1s}]",
        "rateLimits[0].key: apiKey on a route that takes API keys would name counters by the secret key; use key: user",
    ),
}


def problems(text: str) -> list[str]:
    _, found = parse_route_file(text, Origin("git", FILE, revision="0123456789abcdef"))
    return [str(p) for p in found]


@pytest.mark.parametrize(("line", "expected"), CASES.values(), ids=list(CASES))
def test_a_bad_api_key_setting_names_file_field_and_reason(line: str, expected: str) -> None:
    [problem] = problems(route(line))
    assert expected in problem, problem
    assert problem.startswith(f"{FILE}:"), problem


def test_good_api_key_settings_parse_with_their_defaults() -> None:
    routes, found = parse_route_file(route("  auth: {apiKeys: true, consumers: {deny: [partner-c]}}"), Origin("git", FILE))
    assert found == []
    auth = routes[0].spec.auth
    assert (auth.api_keys, auth.jwt, auth.required) == (True, True, True)
    assert auth.consumers is not None and auth.consumers.deny == ["partner-c"] and auth.consumers.allow == []
    plain, found = parse_route_file(route(), Origin("git", FILE))
    assert found == [] and (plain[0].spec.auth.api_keys, plain[0].spec.auth.consumers) == (False, None)


def test_gatehouse_validate_reports_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "orders.yaml").write_text(route("  auth: {jwt: false}"))
    assert validate.run(argparse.Namespace(paths=[tmp_path], config=None, source=None)) == 1
    assert "orders.yaml:7: spec.auth.jwt: false leaves no way in" in capsys.readouterr().err


def test_ext_authz_accepts_the_consumer_names_the_schema_accepts() -> None:
    """The name travels from the model to Redis and back into a header: one alphabet."""
    assert f"^{CONSUMER.pattern}$" == CONSUMER_PATTERN
    assert f"^{apikey._CONSUMER.pattern}$" == CONSUMER_PATTERN
