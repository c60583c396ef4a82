"""`retries.on` became `retryOn`: kubectl (YAML 1.1) turns a bare `on` key into `true`."""

from __future__ import annotations

import pytest

from control_plane.model import Origin, parse_route_file

HEAD = "apiVersion: gatehouse.io/v1alpha1\nkind: Route\nmetadata: {name: r}\nspec:\n  match: {path: /r}\n  backends: [{service: s, port: 80}]\n"


@pytest.mark.parametrize("key", ["on", '"true"'])
def test_the_old_name_and_its_yaml_1_1_spelling_get_a_precise_error(key: str) -> None:
    routes, problems = parse_route_file(HEAD + f"  retries: {{attempts: 2, {key}: [reset]}}\n", Origin("git", "r.yaml"))
    assert routes == []
    assert [str(p) for p in problems] == [
        f"r.yaml:7: spec.retries.retryOn: found the key {key.strip(chr(34))!r}; the field is named retryOn "
        "(an unquoted `on` key is the boolean true in YAML 1.1, as kubectl reads it)"
    ]


def test_retry_on_parses() -> None:
    routes, problems = parse_route_file(HEAD + "  retries: {attempts: 2, retryOn: [reset, 503]}\n", Origin("git", "r.yaml"))
    assert problems == [] and routes[0].spec.retries is not None
    assert routes[0].spec.retries.retry_on == ["reset", "503"]
