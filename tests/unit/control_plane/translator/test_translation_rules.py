"""The rules the golden files show, asserted directly, so a careless --update-golden cannot hide a regression."""

from __future__ import annotations

from typing import Any

import pytest

from control_plane.model import Origin, parse_route_file
from control_plane.render import resource_data
from control_plane.translator import GatewaySettings, RouteTranslator
from control_plane.translator.virtual_hosts import vhost_name
from tests.unit.control_plane.translator.golden import translate_case

IDEMPOTENT = "GET|HEAD|OPTIONS|PUT|DELETE"


def vhosts(case: str) -> dict[str, list[dict[str, Any]]]:
    [config] = translate_case(case).data("routes")
    return {vhost["name"]: vhost.get("routes", []) for vhost in config["virtual_hosts"]}


def entries(case: str, name: str, vhost: str = "any") -> list[dict[str, Any]]:
    return [e for e in vhosts(case)[vhost] if e["name"] == name]


def method_matcher(entry: dict[str, Any]) -> dict[str, Any] | None:
    return next((h for h in entry["match"].get("headers", []) if h["name"] == ":method"), None)


def test_path_kinds_map_to_envoy_matchers_in_specificity_order() -> None:
    routes = vhosts("path_kinds")["any"]
    assert [e["name"] for e in routes] == [
        "shop/orders-bulk",
        "shop/order-items",  # "/api/v2/orders/{id}/items" itself ...
        "shop/order-items",  # ... and below it
        "shop/order-by-id",
        "shop/invoices",
        "shop/orders-tree",
        "shop/prefix-v2",
        "shop/prefix-api",
        "shop/everything-else",
    ]
    items = [e["match"]["path_match_policy"]["typed_config"]["path_template"] for e in routes if e["name"] == "shop/order-items"]
    assert items == ["/api/v2/orders/{id}/items", "/api/v2/orders/{id}/items/**"]
    matches = {e["name"]: e["match"] for e in routes}
    assert matches["shop/orders-bulk"] == {"path": "/api/v2/orders/bulk"}
    template = matches["shop/order-by-id"]["path_match_policy"]
    assert template["name"] == "envoy.path.match.uri_template.uri_template_matcher"
    assert template["typed_config"]["path_template"] == "/api/v2/orders/{id}"
    assert matches["shop/invoices"] == {"safe_regex": {"regex": "/api/v2/orders/[0-9]+/invoice(\\.pdf)?"}}
    # "/a/**" covers "/a" itself and everything below it, never "/ab".
    assert matches["shop/orders-tree"] == {"path_separated_prefix": "/api/v2/orders"}
    assert matches["shop/everything-else"] == {"prefix": "/"}
    assert matches["shop/prefix-api"] == {"prefix": "/api/"}


def test_every_entry_carries_its_provenance() -> None:
    for entry in vhosts("path_kinds")["any"]:
        metadata = entry["metadata"]["filter_metadata"]["gatehouse"]
        assert metadata["route"] == entry["name"]
        assert metadata["origin"].startswith("file:path_kinds.yaml:")


def test_hostless_routes_join_every_virtual_host_and_named_hosts_get_their_own() -> None:
    hosts = vhosts("hosts")
    assert list(hosts) == [vhost_name("*.shop.example.com"), vhost_name("admin.example.com"), vhost_name("api.example.com"), "any"]
    names = {vhost: [e["name"] for e in routes] for vhost, routes in hosts.items()}
    # Host-less routes (and routes listing "*") come after a host's own routes, in path order.
    for vhost in hosts:
        assert names[vhost][-2:] == ["ops/healthz", "shop/catch-all"]
    assert names["any"] == ["ops/healthz", "shop/catch-all"]
    assert names[vhost_name("api.example.com")] == ["shop/api-bulk", "shop/api-orders", "ops/healthz", "shop/catch-all"]
    assert names[vhost_name("*.shop.example.com")] == ["shop/api-orders", "ops/healthz", "shop/catch-all"]
    assert names[vhost_name("admin.example.com")] == ["ops/admin", "ops/healthz", "shop/catch-all"]
    assert "ops/admin" not in names[vhost_name("api.example.com")]
    [config] = translate_case("hosts").data("routes")
    domains = {v["name"]: v["domains"] for v in config["virtual_hosts"]}
    assert domains["any"] == ["*"] and domains[vhost_name("*.shop.example.com")] == ["*.shop.example.com"]


def test_methods_and_headers() -> None:
    [get] = entries("methods_headers", "shop/get-only")
    assert method_matcher(get) == {"name": ":method", "string_match": {"exact": "GET"}}
    [writes] = entries("methods_headers", "shop/writes")
    assert method_matcher(writes) == {"name": ":method", "string_match": {"safe_regex": {"regex": "POST|PUT|PATCH"}}}
    [mobile] = entries("methods_headers", "shop/mobile")
    headers = {h["name"]: h for h in mobile["match"]["headers"]}
    assert headers["x-client"]["string_match"] == {"exact": "mobile"}
    assert headers["x-app-version"]["string_match"] == {"prefix": "3."}
    assert headers["x-device-id"]["string_match"] == {"safe_regex": {"regex": "[0-9a-f]{16}"}}
    assert headers["x-debug"] == {"name": "x-debug", "present_match": True, "invert_match": True}
    assert headers["x-legacy"] == {"name": "x-legacy", "present_match": False}


def test_weight_zero_backends_keep_a_cluster_but_get_no_traffic() -> None:
    [checkout] = entries("weighted_backends", "shop/checkout")
    assert checkout["route"]["weighted_clusters"]["clusters"] == [
        {"name": "shop/checkout:8080", "weight": 90},
        {"name": "shop/checkout-v3:8080", "weight": 10},
    ]
    clusters = {c["name"] for c in translate_case("weighted_backends").data("clusters")}
    assert {"shop/checkout-v4:8080", "shop/search:8080"} <= clusters
    [payments] = entries("weighted_backends", "shop/payments")
    assert [c["name"] for c in payments["route"]["weighted_clusters"]["clusters"]] == [
        "billing/payments:9090",
        "billing/payments:9091",
    ]


def test_rewrites() -> None:
    route = {e["name"]: e for e in vhosts("rewrites")["any"]}
    assert route["shop/exact-rewrite"]["route"]["prefix_rewrite"] == "/internal/status"
    assert route["shop/glob-rewrite"]["route"]["prefix_rewrite"] == "/legacy"
    template = route["shop/template-rewrite"]
    rewrite = template["route"]["path_rewrite_policy"]
    assert rewrite["name"] == "envoy.path.rewrite.uri_template.uri_template_rewriter"
    assert rewrite["typed_config"]["path_template_rewrite"] == "/v3/orders/{id}"
    glob = route["shop/template-glob-rewrite"]
    assert glob["match"]["path_match_policy"]["typed_config"]["path_template"] == "/api/v2/users/{user}/orders/{gh_rest=**}"
    assert glob["route"]["path_rewrite_policy"]["typed_config"]["path_template_rewrite"] == "/internal/users/{user}/orders/{gh_rest}"
    # Without a rewrite, the glob stays anonymous.
    plain = route["shop/template-no-rewrite"]
    assert plain["match"]["path_match_policy"]["typed_config"]["path_template"] == "/api/v2/carts/{cart}/**"
    assert route["shop/regex-rewrite"]["route"]["regex_rewrite"] == {
        "pattern": {"regex": "^/reports/([0-9]{4})-([0-9]{2})\\.csv$"},
        "substitution": "/v2/reports/\\1/\\2.csv",
    }
    for entry in route.values():
        kinds = {"prefix_rewrite", "regex_rewrite", "path_rewrite_policy"} & set(entry["route"])
        assert len(kinds) <= 1, entry["name"]


def test_header_operations_overwrite_and_are_sorted_by_name() -> None:
    [orders] = entries("header_ops", "shop/orders")
    assert [h["header"]["key"] for h in orders["request_headers_to_add"]] == ["x-api-version", "x-b-first-by-name", "x-empty"]
    added = orders["request_headers_to_add"] + orders["response_headers_to_add"]
    assert {h["append_action"] for h in added} == {"OVERWRITE_IF_EXISTS_OR_ADD"}
    # Without keep_empty_value Envoy skips an empty value, and the client's header passes through.
    assert all(h["keep_empty_value"] is True for h in added)
    assert orders["request_headers_to_add"][2]["header"] == {"key": "x-empty"}
    assert orders["request_headers_to_remove"] == ["x-debug-token", "x-forwarded-client-cert"]
    assert orders["response_headers_to_remove"] == ["x-internal-trace-id", "server"]
    [ping] = entries("header_ops", "shop/response-only")
    assert "request_headers_to_add" not in ping and ping["response_headers_to_remove"] == ["x-powered-by"]


def test_timeouts_in_envoy_duration_form() -> None:
    [slow] = entries("timeouts", "shop/slow-report")
    assert (slow["route"]["timeout"], slow["route"]["idle_timeout"]) == ("90s", "300s")
    [quick] = entries("timeouts", "shop/quick")
    assert quick["route"]["timeout"] == "0.250s" and quick["route"]["idle_timeout"] == "1.500s"
    assert quick["route"]["retry_policy"]["per_try_timeout"] == "0.100s"
    # perTry without retries: the one attempt still gets its timeout, in a policy without retries.
    [per_try] = entries("timeouts", "shop/per-try-no-retries")
    assert per_try["route"]["retry_policy"] == {"num_retries": 0, "per_try_timeout": "1s"}
    assert per_try["route"]["timeout"] == "2s"


def test_retries_without_methods_split_into_idempotent_with_policy_and_the_rest_without() -> None:
    first, second = entries("retries", "shop/any-method")
    assert method_matcher(first) == {"name": ":method", "string_match": {"safe_regex": {"regex": IDEMPOTENT}}}
    policy = first["route"]["retry_policy"]
    assert policy["retry_on"] == "connect-failure,reset,5xx,retriable-status-codes"
    assert policy["retriable_status_codes"] == [429, 503]
    assert policy["num_retries"] == 2 and policy["per_try_timeout"] == "3s"
    assert policy["retry_host_predicate"][0]["name"] == "envoy.retry_host_predicates.previous_hosts"
    # The other methods are not retried, but perTry still bounds their one attempt.
    assert "headers" not in second["match"]
    assert second["route"]["retry_policy"] == {"num_retries": 0, "per_try_timeout": "3s"}
    assert first["route"]["timeout"] == second["route"]["timeout"] == "10s"
    routes = vhosts("retries")["any"]
    assert routes.index(first) + 1 == routes.index(second), "the catch-all half comes right after the retried half"


def test_retries_with_get_and_post_retry_only_get() -> None:
    get, post = entries("retries", "shop/get-and-post")
    assert method_matcher(get) == {"name": ":method", "string_match": {"exact": "GET"}}
    assert get["route"]["retry_policy"]["num_retries"] == 3
    assert method_matcher(post) == {"name": ":method", "string_match": {"exact": "POST"}}
    assert "retry_policy" not in post["route"]


def test_retries_on_idempotent_methods_only_or_with_zero_attempts_do_not_split() -> None:
    [reads] = entries("retries", "shop/reads-only")
    assert reads["route"]["retry_policy"]["retry_on"] == "gateway-error"
    assert [h["name"] for h in reads["match"]["headers"]] == [":method", "x-client"]
    [none] = entries("retries", "shop/no-retries")
    assert "retry_policy" not in none["route"]


def test_disabled_routes_answer_directly() -> None:
    route = {e["name"]: e for e in vhosts("disabled")["any"]}
    assert route["shop/api-v1-retired"]["direct_response"] == {
        "status": 410,
        "body": {"inline_string": "API v1 is retired; use /api/v2\n"},
    }
    assert route["shop/maintenance"]["direct_response"] == {"status": 503}
    assert route["shop/maintenance"]["response_headers_to_add"][0]["header"] == {"key": "retry-after", "value": "120"}
    assert route["shop/new-search"]["direct_response"] == {"status": 404}
    assert all("route" not in e for e in route.values())
    assert len(entries("disabled", "shop/new-search")) == 1, "no retry split for a direct response"
    # new-search still declares backends, but a disabled route sends no traffic: no cluster.
    result = translate_case("disabled")
    assert result.translation.cluster_refs == () and result.data("clusters") == [] and result.data("endpoints") == []


def test_clusters_are_eds_over_ads_and_endpoints_follow_the_side_file() -> None:
    result = translate_case("path_kinds")
    for cluster in result.data("clusters"):
        assert cluster["type"] == "EDS"
        assert cluster["eds_cluster_config"]["eds_config"] == {"ads": {}, "resource_api_version": "V3"}
    assignments = {a["cluster_name"]: a for a in result.data("endpoints")}
    assert set(assignments) == {c["name"] for c in result.data("clusters")}
    assert "endpoints" not in assignments["shop/api-gateway:8080"]
    v3 = assignments["shop/order-service-v3:8080"]["endpoints"]
    assert [loc["locality"]["zone"] for loc in v3] == ["zone-a", "zone-b"]
    assert v3[1]["lb_endpoints"][0]["load_balancing_weight"] == 3
    socket = assignments["shop/invoice-service:9000"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
    assert socket == {"address": "fd00::5", "port_value": 9000}


def test_listener_takes_routes_over_rds_from_ads() -> None:
    [listener] = translate_case("empty").data("listeners")
    hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
    assert hcm["rds"] == {"config_source": {"ads": {}, "resource_api_version": "V3"}, "route_config_name": "gatehouse_http"}
    # Identity headers are stripped on every route, even without ext_authz.
    assert [f["name"] for f in hcm["http_filters"]] == [
        "gatehouse.response_headers", "envoy.filters.http.header_mutation", "envoy.filters.http.body_size_limit",
        "envoy.filters.http.rbac", "envoy.filters.http.local_ratelimit", "gatehouse.breaker_reroute",
        "gatehouse.cache_request", "envoy.filters.http.cache", "envoy.filters.http.router"
    ]
    removed = [m["remove"] for m in hcm["http_filters"][1]["typed_config"]["mutations"]["request_mutations"]]
    assert removed == ["x-user-id", "x-user-role", "x-scope", "x-consumer", "x-principal", "x-gatehouse-cache-control"]
    assert hcm["normalize_path"] and hcm["merge_slashes"] and hcm["use_remote_address"]
    assert translate_case("empty").data("clusters") == []


def test_a_wildcard_host_route_stays_reachable_on_a_more_specific_named_host() -> None:
    """Envoy picks only the most specific vhost; without the wildcard route in the
    api.example.com vhost, api.example.com/a answered 404 (checked on Envoy 1.40)."""
    text = "".join(
        f"---\napiVersion: gatehouse.io/v1alpha1\nkind: Route\nmetadata: {{name: {name}}}\n"
        f"spec: {{auth: {{required: false}}, hosts: ['{host}'], match: {{path: {path}}}, backends: [{{service: s, port: 80}}]}}\n"
        for name, host, path in [("wild", "*.example.com", "/a"), ("exact", "api.example.com", "/b")]
    )
    routes, problems = parse_route_file(text, Origin("file", "hosts.yaml"))
    assert problems == []
    [config] = [resource_data(r) for r in RouteTranslator(GatewaySettings()).translate(routes).routes]
    by_domain = {tuple(v["domains"]): [e["name"] for e in v.get("routes", [])] for v in config["virtual_hosts"]}
    assert by_domain[("*.example.com",)] == ["default/wild"]
    # api.example.com matches *.example.com, so the request must still find /a there.
    assert "default/wild" in by_domain[("api.example.com",)]


def route_names(case: str) -> dict[str, list[str]]:
    return {vhost: [e["name"] for e in routes] for vhost, routes in vhosts(case).items()}


def test_wildcard_host_routes_join_every_virtual_host_they_cover() -> None:
    names = route_names("wildcard_hosts")
    # Each host: its own routes, then wildcards covering it (longer first), then host-less
    # ones; path order within each group (/multi before /wild/**).
    assert names == {
        vhost_name("*.api.example.com"): ["shop/api-sub", "shop/multi", "shop/wild", "shop/any-com", "ops/healthz"],
        vhost_name("*.com"): ["shop/any-com", "ops/healthz"],
        vhost_name("*.example.com"): ["shop/multi", "shop/wild", "shop/any-com", "ops/healthz"],
        # shop/api's /api/** is less specific than /multi, but names the host exactly.
        vhost_name("api.example.com"): ["shop/api", "shop/multi", "shop/wild", "shop/any-com", "ops/healthz"],
        # "*.example.com" does not match "example.com" in Envoy; "*.com" does.
        vhost_name("example.com"): ["shop/apex", "shop/any-com", "ops/healthz"],
        vhost_name("shop.example.org"): ["shop/multi", "ops/healthz"],
        "any": ["ops/healthz"],
    }
    [config] = translate_case("wildcard_hosts").data("routes")
    assert all(v["name"] == vhost_name(v["domains"][0]) for v in config["virtual_hosts"] if v["name"] != "any")


def template(entry: dict[str, Any]) -> str:
    return entry["match"]["path_match_policy"]["typed_config"]["path_template"]  # type: ignore[no-any-return]


def template_rewrite(entry: dict[str, Any]) -> str | None:
    policy = entry["route"].get("path_rewrite_policy")
    return None if policy is None else policy["typed_config"]["path_template_rewrite"]


@pytest.mark.parametrize(
    "name, expected",
    [
        # (template, rewrite) per entry: the base template first, then the glob.
        ("shop/users", [("/users/{id}", None), ("/users/{id}/**", None)]),
        ("shop/accounts", [("/accounts/{id}", "/v2/accounts/{id}"), ("/accounts/{id}/{gh_rest=**}", "/v2/accounts/{id}/{gh_rest}")]),
        ("shop/carts-to-root", [("/carts/{id}", "/{id}"), ("/carts/{id}/{gh_rest=**}", "/{id}/{gh_rest}")]),
        ("shop/tenant-reports", [("/{tenant}/reports", "/r/{tenant}/reports"), ("/{tenant}/reports/{gh_rest=**}", "/r/{tenant}/reports/{gh_rest}")]),
        ("shop/four-variables", [("/t/{a}/{b}/{c}/{d}", "/deep/{a}/{b}/{c}/{d}"), ("/t/{a}/{b}/{c}/{d}/{gh_rest=**}", "/deep/{a}/{b}/{c}/{d}/{gh_rest}")]),
    ],
)
def test_glob_templates_also_match_their_base(name: str, expected: list[tuple[str, str | None]]) -> None:
    assert [(template(e), template_rewrite(e)) for e in entries("glob_templates", name)] == expected


def test_glob_template_base_and_glob_are_each_split_for_retries() -> None:
    found = entries("glob_templates", "shop/orders-retried")
    assert [(template(e), method_matcher(e) is not None, "num_retries" in e["route"].get("retry_policy", {})) for e in found] == [
        ("/orders/{id}", True, True),
        ("/orders/{id}", False, False),
        ("/orders/{id}/**", True, True),
        ("/orders/{id}/**", False, False),
    ]
    assert all({"name": "x-client", "string_match": {"exact": "web"}} in e["match"]["headers"] for e in found)


@pytest.mark.parametrize(
    "vhost, name, prefix_rewrite",
    [
        # Root "/**" is match.prefix "/": the rewrite always ends in "/" ("/v3orders" was a bug).
        (vhost_name("v3.example.com"), "shop/root-v3", "/v3/"),
        (vhost_name("v3-slash.example.com"), "shop/root-v3-slash", "/v3/"),
        (vhost_name("same.example.com"), "shop/root-to-root", "/"),
    ],
)
def test_root_glob_rewrites(vhost: str, name: str, prefix_rewrite: str) -> None:
    [entry] = [e for e in vhosts("root_rewrites")[vhost] if e["name"] == name]
    assert entry["match"] == {"prefix": "/"}
    assert entry["route"]["prefix_rewrite"] == prefix_rewrite
    assert route_names("root_rewrites")[vhost] == [name, "shop/web-root"]


def test_rewrite_to_root_for_every_path_kind() -> None:
    route = {e["name"]: e for e in vhosts("rewrite_to_root")["any"]}
    assert route["shop/exact"]["route"]["prefix_rewrite"] == "/"
    assert route["shop/prefix"]["route"]["prefix_rewrite"] == "/"
    assert template_rewrite(route["shop/template"]) == "/{id}"
    assert [template_rewrite(e) for e in entries("rewrite_to_root", "shop/glob-template")] == ["/{id}", "/{id}/{gh_rest}"]
    # A segment prefix: prefix_rewrite "/" would give "//x"; an anchored regex removes the prefix and one "/".
    segment = route["shop/segment"]
    assert segment["match"] == {"path_separated_prefix": "/api/v1"}
    assert segment["route"]["regex_rewrite"] == {"pattern": {"regex": "^/api/v1/?"}, "substitution": "/"}
    special = route["shop/segment-special-characters"]["route"]["regex_rewrite"]["pattern"]["regex"]
    assert special == "^/a\\-b\\.c\\~d/\\$x\\+\\(y\\)/?"


def test_limits_reach_envoy_unchanged() -> None:
    [per_try] = entries("limits", "shop/per-try-only")
    assert per_try["route"]["retry_policy"] == {"num_retries": 0, "per_try_timeout": "20s"}
    retried, rest = entries("limits", "shop/longest-timeouts")
    assert retried["route"]["timeout"] == retried["route"]["idle_timeout"] == "2592000s"
    policy = retried["route"]["retry_policy"]
    assert (policy["num_retries"], policy["per_try_timeout"], policy["retry_on"]) == (10, "2592000s", "reset,retriable-status-codes")
    assert policy["retriable_status_codes"] == [503], "`retryOn: [503]` unquoted is the status code"
    assert rest["route"]["retry_policy"] == {"num_retries": 0, "per_try_timeout": "2592000s"}
    [regexes] = entries("limits", "shop/largest-regexes")
    assert regexes["match"]["safe_regex"] == {"regex": "(ab|cd){16}"}


# --- hostname before path (Gateway API precedence) -------------------------------------------


def _vhost_order(routes: list[tuple[str, str | None]], vhost: str, path: str = "/x") -> list[str]:
    text = "".join(
        f"---\napiVersion: gatehouse.io/v1alpha1\nkind: Route\nmetadata: {{name: {name}}}\n"
        f"spec: {{auth: {{required: false}}, {f'hosts: [{host!r}], ' if host else ''}match: {{path: {path}}}, "
        f"backends: [{{service: {name}, port: 80}}]}}\n"
        for name, host in routes
    )
    parsed, problems = parse_route_file(text, Origin("file", "hosts.yaml"))
    assert problems == []
    [config] = [resource_data(r) for r in RouteTranslator(GatewaySettings()).translate(parsed).routes]
    [found] = [v for v in config["virtual_hosts"] if v["name"] == vhost]
    return [e["name"] for e in found.get("routes", [])]


@pytest.mark.parametrize(
    "wider",
    [
        # Was a regression of af8d559: with equal paths the wildcard route came first by name.
        pytest.param(("a-wild", "*.example.com"), id="wildcard-host-route"),
        # Was older: a host-less route with the same path sorted (by name) first and shadowed it.
        pytest.param(("a-any", None), id="host-less-route"),
    ],
)
def test_a_route_on_the_exact_host_wins_over_a_wider_one(wider: tuple[str, str | None]) -> None:
    """Same path, same conditions: on api.example.com, the route written for api.example.com
    must be reached, whatever the names of the routes reaching that host through a wider one."""
    assert _vhost_order([wider, ("b-api", "api.example.com")], vhost_name("api.example.com"))[0] == "default/b-api"


def test_same_path_ranks_exact_host_then_wildcards_longest_first_then_host_less() -> None:
    routes: list[tuple[str, str | None]] = [
        ("a-any", None),
        ("b-com", "*.com"),
        ("c-example", "*.example.com"),
        ("d-api-wild", "*.api.example.com"),
        ("e-exact", "v1.api.example.com"),
    ]
    assert _vhost_order(routes, vhost_name("v1.api.example.com")) == [
        "default/e-exact",
        "default/d-api-wild",
        "default/c-example",
        "default/b-com",
        "default/a-any",
    ]
    # The "*" host holds only host-less routes.
    assert _vhost_order(routes, "any") == ["default/a-any"]


def test_host_precedence_golden() -> None:
    """At the same path: exact host, then wildcard host, then host-less. And the hostname ranks
    first: a more specific path from a wider host still comes after a less specific path on
    the exact host (so api.example.com/api/v2/orders/bulk reaches d-exact-prefix)."""
    names = route_names("host_precedence")
    assert names[vhost_name("api.example.com")] == [
        "shop/c-exact",  # api.example.com  /orders
        "shop/d-exact-prefix",  # api.example.com  prefix /api
        "shop/e-wild-bulk",  # *.example.com    /api/v2/orders/bulk (more specific than /api)
        "shop/b-wildcard",  # *.example.com    /orders
        "shop/a-anywhere",  # no host          /orders
        "shop/f-anywhere-by-id",  # no host          /api/v2/orders/{id} (more specific than /api)
    ]
    assert names[vhost_name("*.example.com")] == ["shop/e-wild-bulk", "shop/b-wildcard", "shop/a-anywhere", "shop/f-anywhere-by-id"]
    assert names["any"] == ["shop/a-anywhere", "shop/f-anywhere-by-id"]
    # The global order is by path alone; it is not what the api.example.com vhost follows.
    model = [r.id for r in translate_case("host_precedence").translation.model]
    assert model.index("shop/e-wild-bulk") < model.index("shop/d-exact-prefix")
    matches = {e["name"]: e["match"] for e in vhosts("host_precedence")[vhost_name("api.example.com")]}
    assert matches["shop/d-exact-prefix"] == {"prefix": "/api"}
    assert matches["shop/e-wild-bulk"] == {"path": "/api/v2/orders/bulk"}
