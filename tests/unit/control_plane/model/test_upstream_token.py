"""``auth.upstreamToken`` in a route file: what is accepted, and each refusal as the author
sees it (file, line, field, reason), through ``gatehouse validate`` too."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from control_plane.model import Origin, parse_route_file
from gatehouse.commands import validate

FILE = "routes/billing.yaml"
HEADER = (
    "apiVersion: gatehouse.io/v1alpha1\nkind: Route\nmetadata: {name: billing, namespace: legacy}\nspec:\n"
    "  match: {pathPrefix: /billing}\n  backends: [{service: billing, port: 8080}]\n"
)


def route(auth: str) -> str:
    """The route with ``auth: <auth>`` on line 7."""
    return HEADER + f"  auth: {auth}\n"


CASES: dict[str, tuple[str, str]] = {
    "a public route": (
        route("{required: false, upstreamToken: {audience: legacy}}"),
        f"{FILE}:7: spec.auth.upstreamToken: a public route (required: false) has no verified subject to put in a token",
    ),
    "no audience": (route("{upstreamToken: {}}"), f"{FILE}:7: spec.auth.upstreamToken.audience: required field is missing"),
    "an audience with a space": (route("{upstreamToken: {audience: 'a b'}}"), f"{FILE}:7: spec.auth.upstreamToken.audience:"),
    "an unknown field": (
        route("{upstreamToken: {audience: a, ttl: 60s}}"),
        f"{FILE}:7: spec.auth.upstreamToken.ttl: unknown field",
    ),
    "exchange without url": (
        route("{upstreamToken: {audience: a, exchange: {}}}"),
        f"{FILE}:7: spec.auth.upstreamToken.exchange.url: required field is missing",
    ),
    "exchange url not http": (
        route("{upstreamToken: {audience: a, exchange: {url: 'ftp://sts/token'}}}"),
        f"{FILE}:7: spec.auth.upstreamToken.exchange.url: 'ftp://sts/token' is not an http(s) URL with a host",
    ),
    "exchange url with credentials": (
        route("{upstreamToken: {audience: a, exchange: {url: 'https://me:pw@sts/token'}}}"),
        f"{FILE}:7: spec.auth.upstreamToken.exchange.url: must not carry credentials or a #fragment",
    ),
}


@pytest.mark.parametrize(("text", "expected"), CASES.values(), ids=list(CASES))
def test_a_bad_upstream_token_names_file_line_field_and_reason(text: str, expected: str) -> None:
    routes, problems = parse_route_file(text, Origin("git", FILE))
    assert routes == []
    assert len(problems) == 1 and expected in str(problems[0]), [str(p) for p in problems]


def test_a_signed_and_an_exchanged_upstream_token_are_accepted() -> None:
    for auth, url in (("{upstreamToken: {audience: legacy}}", None), ("{upstreamToken: {audience: l, exchange: {url: 'http://127.0.0.1:9/t'}}}", "http://127.0.0.1:9/t")):
        routes, problems = parse_route_file(route(auth), Origin("git", FILE))
        assert problems == [] and routes[0].spec.auth.upstream_token is not None
        exchange = routes[0].spec.auth.upstream_token.exchange
        assert (exchange.url if exchange else None) == url


def test_gatehouse_validate_reports_the_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "billing.yaml"
    path.write_text(route("{required: false, upstreamToken: {audience: legacy}}"))
    assert validate.run(argparse.Namespace(paths=[path], config=None, source=None)) == 1
    err = capsys.readouterr().err
    assert f"{path}:7: spec.auth.upstreamToken: a public route (required: false)" in err and "nothing would be applied" in err
