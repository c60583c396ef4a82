"""The HTTP connection manager's request limits, error bodies and response headers:
what the translator generates, and the `gateway:` settings that drive it (golden cases:
testdata/in/request_limits.yaml with an empty server header, ratelimit.yaml for the
whole filter order)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from control_plane.config import ControlPlaneConfig, Gateway
from control_plane.translator.from_config import gateway_settings
from control_plane.translator import GatewaySettings, RouteTranslator
from control_plane.translator.local_replies import GATEWAY_ERRORS, REQUEST_ID, WAITING_ROOM_HEADER
from control_plane.translator.request_limits import BODY_SIZE_LIMIT_FILTER, BODY_SIZE_LIMIT_TYPE
from control_plane.translator.response_headers import RESPONSE_HEADERS_FILTER
from tests.unit.control_plane.translator import envoy_data

ROUTER = "envoy.filters.http.router"
# What ext_authz answers with (401/403 denials, 503 when it cannot decide): its own JSON bodies.
EXT_AUTHZ_STATUSES = {401, 403, 500, 503}


def hcm(settings: GatewaySettings) -> dict[str, Any]:
    return envoy_data.hcm(RouteTranslator(settings).translate([]))


def filters(settings: GatewaySettings) -> dict[str, dict[str, Any]]:
    return {f["name"]: f.get("typed_config", {}) for f in hcm(settings)["http_filters"]}


def mappers(settings: GatewaySettings = GatewaySettings()) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = hcm(settings)["local_reply_config"]["mappers"]
    return found


# --- request limits ---------------------------------------------------------------------------


def test_defaults_cap_headers_at_60_kib_and_bodies_at_10_mib() -> None:
    config = hcm(GatewaySettings())
    assert config["max_request_headers_kb"] == 60
    body = filters(GatewaySettings())[BODY_SIZE_LIMIT_FILTER]
    assert body == {"@type": BODY_SIZE_LIMIT_TYPE, "max_request_bytes": str(10 * 1024 * 1024)}


def test_configured_limits_reach_the_hcm_and_zero_means_no_body_limit() -> None:
    config = hcm(GatewaySettings(max_request_headers_kb=8, max_request_body_bytes=4096))
    assert config["max_request_headers_kb"] == 8
    assert filters(GatewaySettings(max_request_body_bytes=4096))[BODY_SIZE_LIMIT_FILTER]["max_request_bytes"] == "4096"
    assert BODY_SIZE_LIMIT_FILTER not in filters(GatewaySettings(max_request_body_bytes=0))


# --- response headers -------------------------------------------------------------------------


def test_no_internal_response_headers_and_the_server_header_is_the_gateways() -> None:
    config = hcm(GatewaySettings())
    assert filters(GatewaySettings())[ROUTER]["suppress_envoy_headers"] is True
    mutations = filters(GatewaySettings())[RESPONSE_HEADERS_FILTER]["mutations"]
    assert mutations == {
        "response_mutations": [{"remove_on_match": {"key_matcher": {"prefix": "x-envoy-", "ignore_case": True}}}]
    }
    # OVERWRITE is the enum's zero value: rendered by leaving it out.
    assert (config["server_name"], config.get("server_header_transformation", "OVERWRITE")) == ("gatehouse", "OVERWRITE")


def test_request_ids_are_kept_generated_and_returned() -> None:
    config = hcm(GatewaySettings())
    assert config["preserve_external_request_id"] is True
    assert config["always_set_request_id_in_response"] is True
    assert "generate_request_id" not in config, "the default (true): generated when absent"
    assert "tracing" not in config, "traceparent passes through: no tracer rewrites it"


# --- the gateway's own errors -----------------------------------------------------------------


def test_every_gateway_error_has_one_json_body_with_the_request_id() -> None:
    found = mappers()
    assert len(found) == len(GATEWAY_ERRORS)
    for mapper, error in zip(found, GATEWAY_ERRORS, strict=True):
        if error.keep_body:  # the waiting room writes its own JSON body (with the request id)
            assert "body_format_override" not in mapper and mapper["status_code"] == 503
            continue
        body = mapper["body_format_override"]
        assert body["content_type"] == "application/json"
        assert body["json_format"] == {"error": {"code": error.code, "message": error.message, "request_id": REQUEST_ID}}
    assert len({e.code for e in GATEWAY_ERRORS}) == len(GATEWAY_ERRORS)


def test_no_default_body_format_so_unmatched_local_replies_keep_their_bodies() -> None:
    assert set(hcm(GatewaySettings())["local_reply_config"]) == {"mappers"}


def parts(mapper: dict[str, Any]) -> list[dict[str, Any]]:
    condition: dict[str, Any] = mapper["filter"]
    found: list[dict[str, Any]] = condition["or_filter"]["filters"] if "or_filter" in condition else [condition]
    return found


def test_no_mapper_matches_a_status_ext_authz_answers_with() -> None:
    """ext_authz denials are local replies with their own JSON body: mappers match on Envoy's
    response flags, on statuses ext_authz never uses, or on response code details that are
    not ext_authz's. Two exceptions: the waiting room's keeps that body and matches only
    denials carrying its marker header; token swap's own 424 is made a 503 on purpose
    (tests/unit/control_plane/translator/test_upstream_token.py)."""
    for mapper in mappers():
        if "body_format_override" not in mapper:
            [one] = parts(mapper)
            expression = one["extension_filter"]["typed_config"]["expression"]
            assert expression == (
                f"response.code_details.startsWith('ext_authz_denied') && '{WAITING_ROOM_HEADER}' in response.headers"
            )
            continue
        if mapper["body_format_override"]["json_format"]["error"]["code"] == "upstream_token_unavailable":
            continue
        for one in parts(mapper):
            assert set(one) <= {"response_flag_filter", "status_code_filter", "extension_filter"}, one
            if "status_code_filter" in one:
                comparison = one["status_code_filter"]["comparison"]
                assert comparison.get("op", "EQ") == "EQ"
                assert comparison["value"]["default_value"] not in EXT_AUTHZ_STATUSES
            elif "extension_filter" in one:
                expression = one["extension_filter"]["typed_config"]["expression"]
                assert expression.startswith("response.code_details.startsWith('"), expression
                assert "ext_authz_denied" not in expression, "ext_authz's denials keep their own body"
            else:
                assert "UAEX" not in one["response_flag_filter"]["flags"]


@pytest.mark.parametrize(
    "flag, status, code",
    [
        ("NR", 404, "not_found"),
        ("UO", 503, "upstream_overflow"),
        ("UH", 503, "no_healthy_upstream"),
        ("UT", 504, "upstream_timeout"),
        ("RL", 429, "rate_limited"),
        ("OM", 503, "overloaded"),
    ],
)
def test_the_reason_picks_the_code(flag: str, status: int, code: str) -> None:
    [mapper] = [m for m in mappers() if any(flag in f.get("response_flag_filter", {}).get("flags", []) for f in parts(m))]
    assert mapper["status_code"] == status
    assert mapper["body_format_override"]["json_format"]["error"]["code"] == code


@pytest.mark.parametrize(
    "details, status, code", [("rbac_access_denied", 403, "access_denied"), ("local_rate_limited", 429, "rate_limited"),
     ("ext_authz_error", None, "authorization_unavailable"),
     ("reached_concurrency_limit", 503, "overloaded")]
)
def test_filters_without_a_flag_match_on_their_details(details: str, status: int | None, code: str) -> None:
    expression = f"response.code_details.startsWith('{details}')"
    [mapper] = [
        m for m in mappers() if any(f.get("extension_filter", {}).get("typed_config", {}).get("expression") == expression for f in parts(m))
    ]
    assert mapper.get("status_code") == status
    assert mapper["body_format_override"]["json_format"]["error"]["code"] == code


def test_a_timeout_after_retries_is_a_timeout() -> None:
    """First match wins; a timed-out retried request carries UT and URX."""
    order = [m["body_format_override"]["json_format"]["error"]["code"] for m in mappers() if "body_format_override" in m]
    assert order.index("upstream_timeout") < order.index("upstream_unavailable")


@pytest.mark.parametrize("status, code", [(413, "request_body_too_large"), (431, "request_headers_too_large")])
def test_size_refusals_match_on_their_status(status: int, code: str) -> None:
    [mapper] = [
        m for m in mappers() if m["filter"].get("status_code_filter", {}).get("comparison", {}).get("value", {}).get("default_value") == status
    ]
    assert mapper["body_format_override"]["json_format"]["error"]["code"] == code
    assert "status_code" not in mapper


# --- the gateway: block -----------------------------------------------------------------------


def config(gateway: dict[str, Any]) -> ControlPlaneConfig:
    return ControlPlaneConfig.model_validate({"gateway": gateway, "sources": {}})


def test_the_gateway_block_sets_limits_and_server_header() -> None:
    cp = config({"maxRequestHeadersKb": 16, "maxRequestBodyBytes": 1_048_576, "serverHeader": "edge"})
    settings = gateway_settings(cp, cp.gateway)
    assert (settings.max_request_headers_kb, settings.max_request_body_bytes, settings.server_header) == (16, 1_048_576, "edge")
    default = gateway_settings(config({}), Gateway())
    assert (default.max_request_headers_kb, default.max_request_body_bytes, default.server_header) == (60, 10 * 1024 * 1024, "gatehouse")


def test_node_groups_take_their_own_limits() -> None:
    cp = ControlPlaneConfig.model_validate({"sources": {}, "nodeGroups": {"internal": {"listenerPort": 9080, "maxRequestBodyBytes": 0}}})
    assert gateway_settings(cp, cp.node_groups["internal"]).max_request_body_bytes == 0


@pytest.mark.parametrize(
    "gateway, field",
    [
        ({"maxRequestHeadersKb": 0}, "maxRequestHeadersKb"),
        ({"maxRequestHeadersKb": 8193}, "maxRequestHeadersKb"),
        ({"maxRequestBodyBytes": -1}, "maxRequestBodyBytes"),
        ({"maxRequestBodyBytes": "10MB"}, "maxRequestBodyBytes"),
        ({"serverHeader": "bad\r\nheader"}, "serverHeader"),
        ({"serverHeader": " padded"}, "serverHeader"),
        ({"serverHeader": "x" * 129}, "serverHeader"),
    ],
)
def test_bad_gateway_values_are_refused(gateway: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as raised:
        config(gateway)
    assert field in str(raised.value)
