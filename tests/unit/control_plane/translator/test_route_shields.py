"""Idempotency-keyed retries, IP access lists (RBAC) and the local rate-limit shield."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from google.protobuf import json_format

from control_plane.model import Origin, Route, parse_route_file
from control_plane.translator import GatewaySettings
from control_plane.translator.listeners import http_filters
from control_plane.translator.route_entries import route_entries
from control_plane.translator.shields import RBAC_FILTER, SHIELD_FILTER


def doc(spec: dict[str, Any]) -> str:
    return yaml.safe_dump(
        {"apiVersion": "gatehouse.io/v1alpha1", "kind": "Route", "metadata": {"name": "r", "namespace": "shop"}, "spec": spec},
        sort_keys=False,
    )


def spec(**extra: Any) -> dict[str, Any]:
    match = extra.pop("match", {"pathPrefix": "/r"})
    return {"match": match, "backends": [{"service": "svc", "port": 8080}], **extra}


def route(**extra: Any) -> Route:
    routes, problems = parse_route_file(doc(spec(**extra)), Origin("file", "r.yaml"))
    assert problems == [], [str(p) for p in problems]
    return routes[0]


def problems(**extra: Any) -> list[str]:
    _, found = parse_route_file(doc(spec(**extra)), Origin("file", "r.yaml"))
    return [str(p) for p in found]


def entries(r: Route) -> list[dict[str, Any]]:
    return [json_format.MessageToDict(e, preserving_proto_field_name=True) for e in route_entries(r)]


def groups(r: Route) -> list[tuple[list[dict[str, Any]], bool]]:
    return [
        (e["match"].get("headers", []), e["route"].get("retry_policy", {}).get("num_retries", 0) > 0)
        for e in entries(r)
    ]


# --- retries.idempotencyKeyHeader --------------------------------------------------------------


def test_without_methods_keyed_post_and_patch_get_their_own_retried_entry() -> None:
    r = route(retries={"attempts": 2, "idempotencyKeyHeader": "idempotency-key"})
    assert groups(r) == [
        ([{"name": ":method", "string_match": {"safe_regex": {"regex": "GET|HEAD|OPTIONS|PUT|DELETE"}}}], True),
        (
            [
                {"name": ":method", "string_match": {"safe_regex": {"regex": "POST|PATCH"}}},
                {"name": "idempotency-key", "present_match": True},
            ],
            True,
        ),
        ([], False),
    ]


def test_a_post_only_route_with_a_key_is_retried_with_the_key_and_served_without_it() -> None:
    r = route(match={"path": "/pay", "methods": ["POST"]}, retries={"idempotencyKeyHeader": "x-key"})
    assert groups(r) == [
        ([{"name": ":method", "string_match": {"exact": "POST"}}, {"name": "x-key", "present_match": True}], True),
        ([{"name": ":method", "string_match": {"exact": "POST"}}], False),
    ]


def test_listed_methods_split_into_idempotent_keyed_and_the_rest() -> None:
    r = route(
        match={"pathPrefix": "/r", "methods": ["GET", "POST", "TRACE"]},
        retries={"idempotencyKeyHeader": "x-key"},
    )
    assert groups(r) == [
        ([{"name": ":method", "string_match": {"exact": "GET"}}], True),
        ([{"name": ":method", "string_match": {"exact": "POST"}}, {"name": "x-key", "present_match": True}], True),
        ([{"name": ":method", "string_match": {"safe_regex": {"regex": "POST|TRACE"}}}], False),
    ]


def test_without_a_key_header_post_is_still_never_retried() -> None:
    r = route(retries={"attempts": 2})
    assert [retried for _, retried in groups(r)] == [True, False]
    assert problems(match={"path": "/pay", "methods": ["POST"]}, retries={"attempts": 1}) != []


def test_the_key_header_must_be_a_lowercase_header_name() -> None:
    found = problems(retries={"idempotencyKeyHeader": "Bad Header"})
    assert any("not a lowercase HTTP header name" in p for p in found), found


# --- access ------------------------------------------------------------------------------------


def rbac(r: Route) -> dict[str, Any]:
    [entry] = entries(r)
    config: dict[str, Any] = entry["typed_per_filter_config"][RBAC_FILTER]
    return config


def test_deny_only_allows_everything_but_the_denied_blocks() -> None:
    config = rbac(route(access={"deny": ["127.0.0.1/32"]}))
    rules = config["rbac"]["rules"]
    assert rules.get("action", "ALLOW") == "ALLOW", "ALLOW is the enum's zero value"
    [policy] = rules["policies"].values()
    assert policy["permissions"] == [{"any": True}]
    assert policy["principals"] == [
        {"not_id": {"direct_remote_ip": {"address_prefix": "127.0.0.1", "prefix_len": 32}}}
    ]


def test_allow_and_deny_combine_and_ipv6_is_accepted() -> None:
    config = rbac(route(access={"allow": ["10.0.0.0/8", "2001:db8::/32"], "deny": ["10.1.0.0/16"]}))
    [policy] = config["rbac"]["rules"]["policies"].values()
    assert policy["principals"] == [
        {
            "and_ids": {
                "ids": [
                    {
                        "or_ids": {
                            "ids": [
                                {"direct_remote_ip": {"address_prefix": "10.0.0.0", "prefix_len": 8}},
                                {"direct_remote_ip": {"address_prefix": "2001:db8::", "prefix_len": 32}},
                            ]
                        }
                    },
                    {"not_id": {"direct_remote_ip": {"address_prefix": "10.1.0.0", "prefix_len": 16}}},
                ]
            }
        }
    ]


@pytest.mark.parametrize(
    ("access", "message"),
    [
        ({"allow": ["10.0.0.0/33"]}, "is not a CIDR block"),
        ({"allow": ["10.0.0.1/8"]}, "has host bits set"),
        ({"deny": ["not-an-ip/8"]}, "is not a CIDR block"),
        ({"deny": ["10.0.0.1"]}, "needs a prefix length, like 10.0.0.1/32"),
        ({"allow": ["10.0.0.0/8", "10.0.0.0/8"]}, "is listed twice"),
        ({}, "set allow or deny"),
    ],
)
def test_bad_access_lists_are_rejected_clearly(access: dict[str, Any], message: str) -> None:
    found = problems(access=access)
    assert any(message in p for p in found), found


# --- shield ------------------------------------------------------------------------------------


def test_the_shield_is_a_per_route_token_bucket_always_enforced() -> None:
    [entry] = entries(route(shield={"requestsPerSecond": 50, "burst": 100}))
    config = entry["typed_per_filter_config"][SHIELD_FILTER]
    assert config["token_bucket"] == {"max_tokens": 100, "tokens_per_fill": 50, "fill_interval": "1s"}
    for key in ("filter_enabled", "filter_enforced"):
        assert config[key]["default_value"]["numerator"] == 100
        assert config[key]["default_value"].get("denominator", "HUNDRED") == "HUNDRED"


def test_burst_defaults_to_the_rate_and_may_not_be_below_it() -> None:
    [entry] = entries(route(shield={"requestsPerSecond": 7}))
    assert entry["typed_per_filter_config"][SHIELD_FILTER]["token_bucket"]["max_tokens"] == 7
    found = problems(shield={"requestsPerSecond": 10, "burst": 5})
    assert any("burst (5) must be at least requestsPerSecond (10)" in p for p in found), found
    assert any("requestsPerSecond" in p for p in problems(shield={"requestsPerSecond": 0}))


def test_routes_without_shields_carry_no_per_route_config() -> None:
    [entry] = entries(route())
    assert "typed_per_filter_config" not in entry


def test_the_shield_and_access_filters_run_before_ext_authz_and_the_global_rate_limit() -> None:
    names = [f["name"] for f in http_filters(GatewaySettings())]
    assert names.index(RBAC_FILTER) < names.index(SHIELD_FILTER) < names.index("envoy.filters.http.router")
    [rbac_filter] = [f for f in http_filters(GatewaySettings()) if f["name"] == RBAC_FILTER]
    assert "rules" not in rbac_filter["typed_config"], "inert at listener level"
    [shield_filter] = [f for f in http_filters(GatewaySettings()) if f["name"] == SHIELD_FILTER]
    assert "token_bucket" not in shield_filter["typed_config"], "inert at listener level"
