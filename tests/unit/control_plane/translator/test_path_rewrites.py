"""What path reaches the upstream after a `rewrite.prefix`, by Envoy's documented rules.

Envoy's `prefix_rewrite` swaps the matched `prefix` / `path_separated_prefix` / `path`
for the rewrite text, character for character ("/" + prefix_rewrite "/v3" turns "/x"
into "/v3x"); `regex_rewrite` replaces every match of its pattern in the path; a
uri_template rewrite fills the template's variables in. These tests apply those rules
to the translator's output, so they state what an author gets upstream without
starting Envoy. Each expectation was checked once against a real Envoy 1.40 with an
echo upstream.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from control_plane.model import Origin, parse_route_file
from control_plane.render import resource_data
from control_plane.translator import GatewaySettings, RouteTranslator

HEAD = "apiVersion: gatehouse.io/v1alpha1\nkind: Route\nmetadata: {name: r, namespace: shop}\n"


def entries(match: str, rewrite: str) -> list[dict[str, Any]]:
    text = HEAD + f"spec:\n  auth: {{required: false}}\n  match: {match}\n  backends: [{{service: a, port: 80}}]\n  rewrite: {rewrite}\n"
    routes, problems = parse_route_file(text, Origin("file", "r.yaml"))
    assert problems == []
    data = resource_data(RouteTranslator(GatewaySettings()).translate(routes).routes[0])
    return data["virtual_hosts"][0]["routes"]  # type: ignore[no-any-return]


def entry(match: str, rewrite: str) -> dict[str, Any]:
    [route] = entries(match, rewrite)
    return route


def _template_regex(template: str) -> re.Pattern[str]:
    """Envoy's uri_template as a regex: {x} is one segment, {x=**} and ** are the rest (maybe empty)."""
    out = ""
    for part in re.split(r"(\{[A-Za-z0-9_]+(?:=\*\*)?\}|\*\*)", template):
        if part == "**":
            out += ".*"
        elif part.startswith("{"):
            name, _, glob = part[1:-1].partition("=")
            out += f"(?P<{name}>.*)" if glob else f"(?P<{name}>[^/]+)"
        else:
            out += re.escape(part)
    return re.compile(out)


def envoy_rewrite(route: dict[str, Any], path: str) -> str | None:
    """The upstream path Envoy sends for `path`, or None if the entry does not match it."""
    match = route["match"]
    path_only, _, query = path.partition("?")
    suffix = "?" + query if query else ""
    if "path_match_policy" in match:
        found = _template_regex(match["path_match_policy"]["typed_config"]["path_template"]).fullmatch(path_only)
        if found is None:
            return None
        policy = route["route"].get("path_rewrite_policy")
        if policy is None:
            return path
        template: str = policy["typed_config"]["path_template_rewrite"]
        return re.sub(r"\{([A-Za-z0-9_]+)\}", lambda m: found.group(m.group(1)), template) + suffix
    if "path" in match:
        matched = match["path"] if path_only == match["path"] else None
    elif "path_separated_prefix" in match:
        prefix = match["path_separated_prefix"]
        matched = prefix if path_only == prefix or path_only.startswith(prefix + "/") else None
    else:
        matched = match["prefix"] if path_only.startswith(match["prefix"]) else None
    if matched is None:
        return None
    action = route["route"]
    if "regex_rewrite" in action:
        # Envoy replaces every match of the pattern in the path (RE2 GlobalReplace); the query is kept.
        regex = action["regex_rewrite"]
        return re.sub(regex["pattern"]["regex"], regex["substitution"], path_only) + suffix
    if "prefix_rewrite" not in action:
        return path
    rewrite: str = action["prefix_rewrite"]
    return rewrite + path[len(matched) :]


def upstream_path(routes: list[dict[str, Any]], path: str) -> str | None:
    """Envoy takes the first entry that matches."""
    return next((found for found in (envoy_rewrite(r, path) for r in routes) if found is not None), None)


# Every row was sent through a real Envoy 1.40 running the translator's config, with an echo upstream.
REWRITES = [
    # (match, rewrite, request path, upstream path; None: no match)
    ("{path: /api/v2/status}", "{prefix: /internal/status}", "/api/v2/status", "/internal/status"),
    ("{path: /api/v1/**}", "{prefix: /legacy}", "/api/v1/a/b", "/legacy/a/b"),
    ("{path: /api/v1/**}", "{prefix: /legacy}", "/api/v1", "/legacy"),
    ("{path: /api/v1/**}", "{prefix: /legacy}", "/api/v1x", None),
    ("{pathPrefix: /static/}", "{prefix: /assets/}", "/static/app.js", "/assets/app.js"),
    # The root glob: "/**" matches prefix "/", so the rewrite must end in "/" ("/v3orders" was a bug).
    pytest.param("{path: /**}", "{prefix: /v3}", "/orders", "/v3/orders", id="root-glob"),
    pytest.param("{path: /**}", "{prefix: /v3}", "/", "/v3/", id="root-glob-root"),
    pytest.param("{path: /**}", "{prefix: /v3/}", "/orders", "/v3/orders", id="root-glob-trailing-slash"),
    pytest.param("{path: /**}", "{prefix: /}", "/orders/1", "/orders/1", id="root-glob-to-root"),
    # A trailing "/" in the rewrite is the same prefix ("/v3//orders" was a bug).
    pytest.param("{path: /api/**}", "{prefix: /v3/}", "/api/orders", "/v3/orders", id="glob-rewrite-with-trailing-slash"),
    pytest.param("{path: /api/**}", "{prefix: /v3/}", "/api", "/v3", id="glob-rewrite-with-trailing-slash-base"),
    # Rewrite to "/": the prefix goes, one slash stays ("//orders" with a plain prefix_rewrite).
    pytest.param("{path: /api/**}", "{prefix: /}", "/api/orders", "/orders", id="glob-to-root"),
    pytest.param("{path: /api/**}", "{prefix: /}", "/api", "/", id="glob-to-root-base"),
    pytest.param("{path: /api/**}", "{prefix: /}", "/api/", "/", id="glob-to-root-base-slash"),
    pytest.param("{path: /api/**}", "{prefix: /}", "/api/a/b?q=1", "/a/b?q=1", id="glob-to-root-query"),
    pytest.param("{path: /api/**}", "{prefix: /}", "/apix", None, id="glob-to-root-no-partial-segment"),
    pytest.param("{path: /a-b.c~d/**}", "{prefix: /}", "/a-b.c~d/x", "/x", id="glob-to-root-escaped-literal"),
    pytest.param("{path: /status}", "{prefix: /}", "/status", "/", id="exact-to-root"),
    pytest.param("{path: '/t/{id}'}", "{prefix: /}", "/t/7", "/7", id="template-to-root"),
    # A glob template also matches its base: "/users/{id}/**" takes "/users/1".
    pytest.param("{path: '/users/{id}/**'}", "{prefix: /v2/u}", "/users/1", "/v2/u/1", id="glob-template-base"),
    pytest.param("{path: '/users/{id}/**'}", "{prefix: /v2/u}", "/users/1/", "/v2/u/1/", id="glob-template-base-slash"),
    pytest.param("{path: '/users/{id}/**'}", "{prefix: /v2/u}", "/users/1/a/b", "/v2/u/1/a/b", id="glob-template"),
    pytest.param("{path: '/users/{id}/**'}", "{prefix: /}", "/users/1", "/1", id="glob-template-to-root-base"),
    pytest.param("{path: '/users/{id}/**'}", "{prefix: /}", "/users/1/items", "/1/items", id="glob-template-to-root"),
]


@pytest.mark.parametrize("match, rewrite, request_path, upstream", REWRITES)
def test_prefix_rewrite(match: str, rewrite: str, request_path: str, upstream: str | None) -> None:
    assert upstream_path(entries(match, rewrite), request_path) == upstream


@pytest.mark.parametrize(
    "path, upstream",
    [("/users/1", "/users/1"), ("/users/1/", "/users/1/"), ("/users/1/a/b", "/users/1/a/b"), ("/users", None), ("/users/1x/", "/users/1x/")],
)
def test_a_glob_template_without_rewrite_matches_its_base_too(path: str, upstream: str | None) -> None:
    text = HEAD + "spec:\n  auth: {required: false}\n  match: {path: '/users/{id}/**'}\n  backends: [{service: a, port: 80}]\n"
    routes, problems = parse_route_file(text, Origin("file", "r.yaml"))
    assert problems == []
    data = resource_data(RouteTranslator(GatewaySettings()).translate(routes).routes[0])
    assert upstream_path(data["virtual_hosts"][0]["routes"], path) == upstream


def test_a_template_rewrite_prefix_is_consistent_with_or_without_a_trailing_slash() -> None:
    with_slash = entry("{path: '/api/{id}'}", "{prefix: /v3/}")
    without = entry("{path: '/api/{id}'}", "{prefix: /v3}")
    policy = "path_rewrite_policy"
    assert with_slash["route"][policy] == without["route"][policy]
    assert without["route"][policy]["typed_config"]["path_template_rewrite"] == "/v3/{id}"


def test_rewrite_to_root_uses_an_anchored_regex() -> None:
    """prefix_rewrite "/" would turn /api/orders into //orders; the regex removes "/api" and one "/"."""
    route = entry("{path: /api/v1/**}", "{prefix: /}")
    assert route["match"] == {"path_separated_prefix": "/api/v1"}
    assert route["route"]["regex_rewrite"] == {"pattern": {"regex": "^/api/v1/?"}, "substitution": "/"}
    assert "prefix_rewrite" not in route["route"]


def test_empty_set_value_really_replaces_the_client_header() -> None:
    """`set: {x-tenant: ""}` must not let a client-sent x-tenant through.

    Envoy drops a header_to_add whose value is empty unless `keep_empty_value` is true,
    and then does not overwrite either: the client's value reaches the upstream
    (checked against Envoy 1.40, before and after the fix).
    """
    text = (
        HEAD + "spec:\n  auth: {required: false}\n  match: {path: /a}\n  backends: [{service: a, port: 80}]\n"
        "  headers: {request: {set: {x-tenant: '', x-api: v2}}, response: {set: {x-cache: ''}}}\n"
    )
    routes, problems = parse_route_file(text, Origin("file", "r.yaml"))
    assert problems == []
    [route] = resource_data(RouteTranslator(GatewaySettings()).translate(routes).routes[0])["virtual_hosts"][0]["routes"]
    added = route["request_headers_to_add"] + route["response_headers_to_add"]
    assert [(h["header"]["key"], h["header"].get("value", "")) for h in added] == [("x-api", "v2"), ("x-tenant", ""), ("x-cache", "")]
    assert all(h["keep_empty_value"] is True and h["append_action"] == "OVERWRITE_IF_EXISTS_OR_ADD" for h in added)
