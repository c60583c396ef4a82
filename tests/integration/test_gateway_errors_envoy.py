"""The gateway's own errors, request limits and response headers through a real Envoy.

Envoy-generated replies (no route, too large, no healthy upstream) carry one JSON error
body with the request id; upstream-generated ones and direct responses pass untouched;
x-request-id is kept or generated and reaches the upstream; traceparent passes; no
x-envoy-* header and no upstream `server` header reaches the client.
"""

from __future__ import annotations

import http.client
import re
from pathlib import Path
from typing import Any

import pytest

from control_plane.render import resource_data
from control_plane.translator import GatewaySettings, RouteTranslator
from control_plane.translator.request_limits import BODY_SIZE_LIMIT_FILTER
from tests.harness.envoy import envoy_binary, validate_config, write_bootstrap
from tests.harness.gateway import GatewayStack
from tests.harness.http_client import Reply, wait_for
from tests.harness.route_repo import route_doc
from tests.harness.redis import RedisServer
from tests.harness.window_clock import settle
from tests.integration.conftest import StackFactory
from tests.integration.test_ratelimit_envoy import limited, start

pytestmark = pytest.mark.envoy

BODY_LIMIT = 4096
HEADERS_KB = 8
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
ROUTES = [
    route_doc(
        "echo",
        {"auth": {"required": False},
            "match": {"pathPrefix": "/echo"},
            "backends": [{"service": "svc-a", "port": 8080}],
            # Stands in for an upstream that sends x-envoy-* headers (another Envoy, say).
            "headers": {"response": {"set": {"x-envoy-leaked": "yes", "x-kept": "yes"}}},
        },
    ),
    route_doc(
        "slow",
        {"auth": {"required": False}, "match": {"pathPrefix": "/slow"}, "backends": [{"service": "svc-a", "port": 8080}], "timeouts": {"request": "300ms"}},
    ),
    route_doc("nowhere", {"auth": {"required": False}, "match": {"pathPrefix": "/nowhere"}, "backends": [{"service": "svc-none", "port": 8080}]}),
    route_doc(
        "maintenance",
        {"auth": {"required": False},
            "match": {"pathPrefix": "/maintenance"},
            "backends": [{"service": "svc-a", "port": 8080}],
            "disabled": {"status": 503, "body": "under maintenance"},
        },
    ),
]


def gateway_stack(make_stack: StackFactory, **gateway: Any) -> GatewayStack:
    stack = make_stack(upstreams=("svc-a",))
    stack.configure_gateway(**gateway)
    stack.commit_routes({"routes.yaml": ROUTES})
    stack.start(wait_path="/echo")
    return stack


@pytest.fixture
def stack(make_stack: StackFactory) -> GatewayStack:
    return gateway_stack(make_stack, maxRequestBodyBytes=BODY_LIMIT, maxRequestHeadersKb=HEADERS_KB)


def send(
    stack: GatewayStack, method: str, path: str, headers: dict[str, str] | None = None, body: Any = None, *, chunked: bool = False
) -> Reply:
    conn = http.client.HTTPConnection("127.0.0.1", stack.listener_port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {}, encode_chunked=chunked)
        response = conn.getresponse()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    finally:
        conn.close()


def gateway_error(reply: Reply, status: int, code: str) -> dict[str, Any]:
    assert reply.status == status, (reply.status, reply.body)
    assert reply.headers["content-type"] == "application/json", reply.headers
    error: dict[str, Any] = reply.json()["error"]
    assert set(error) == {"code", "message", "request_id"}, error
    assert error["code"] == code and error["message"], error
    assert error["request_id"] == reply.headers.get("x-request-id"), (error, reply.headers)
    return error


def assert_no_internal_headers(reply: Reply) -> None:
    assert not [name for name in reply.headers if name.startswith("x-envoy-")], reply.headers
    assert reply.headers.get("server") == "gatehouse", reply.headers


def test_no_route_is_a_json_404_with_the_callers_request_id(stack: GatewayStack) -> None:
    reply = stack.get("/no/such/route", headers={"x-request-id": "req-404"})
    assert gateway_error(reply, 404, "not_found")["request_id"] == "req-404"
    assert_no_internal_headers(reply)

    generated = stack.get("/no/such/route")
    assert UUID.match(gateway_error(generated, 404, "not_found")["request_id"]), generated.headers


def test_oversized_headers_are_431_and_a_body_over_the_limit_is_413(stack: GatewayStack) -> None:
    near = send(stack, "GET", "/echo", headers={"x-big": "a" * (HEADERS_KB * 1024 - 1024)})
    assert near.status == 200, near.body
    big = send(stack, "GET", "/echo", headers={"x-request-id": "req-431", "x-big": "a" * (HEADERS_KB * 1024 + 1)})
    # Refused while reading the header block: Envoy has no request headers, so no request id.
    assert gateway_error(big, 431, "request_headers_too_large")["request_id"] is None

    fits = send(stack, "POST", "/echo", body=b"x" * BODY_LIMIT)
    assert fits.status == 200 and fits.json()["method"] == "POST", fits.body
    declared = send(stack, "POST", "/echo", headers={"x-request-id": "req-413"}, body=b"x" * (BODY_LIMIT + 1))
    assert gateway_error(declared, 413, "request_body_too_large")["request_id"] == "req-413"
    # Streamed without a content-length: counted as it arrives. (The echo upstream answers
    # without reading the body; the delay keeps it from answering before the body is in.)
    chunks = iter([b"y" * 3000, b"y" * 3000])
    headers = {"transfer-encoding": "chunked"}
    streamed = send(stack, "POST", "/echo?delay=0.5", headers=headers, body=chunks, chunked=True)
    gateway_error(streamed, 413, "request_body_too_large")


def test_request_ids_and_traceparent_reach_the_upstream_and_come_back(stack: GatewayStack) -> None:
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    reply = stack.get("/echo/x", headers={"x-request-id": "caller-id-1", "traceparent": traceparent})
    assert reply.status == 200, reply.body
    seen = reply.json()["headers"]
    assert seen["x-request-id"] == "caller-id-1" and reply.headers["x-request-id"] == "caller-id-1"
    assert seen["traceparent"] == traceparent
    assert_no_internal_headers(reply)
    assert reply.headers["x-kept"] == "yes", "only x-envoy-* headers are removed"
    assert "x-envoy-expected-rq-timeout-ms" not in seen, "the router adds no x-envoy-* headers"

    generated = stack.get("/echo/y")
    request_id = generated.json()["headers"]["x-request-id"]
    assert UUID.match(request_id) and generated.headers["x-request-id"] == request_id


def test_upstream_errors_and_direct_responses_pass_through_untouched(stack: GatewayStack) -> None:
    failed = stack.get("/echo/fail?status=500", headers={"x-request-id": "req-500"})
    assert failed.status == 500 and failed.headers["x-upstream"] == "svc-a"
    body = failed.json()
    assert set(body) == {"upstream", "method", "path", "headers"} and body["path"] == "/echo/fail?status=500", body
    assert_no_internal_headers(failed)

    maintenance = stack.get("/maintenance")
    assert (maintenance.status, maintenance.body) == (503, b"under maintenance")


def test_no_healthy_upstream_is_a_json_503(stack: GatewayStack) -> None:
    reply = stack.get("/nowhere", headers={"x-request-id": "req-503"})
    assert gateway_error(reply, 503, "no_healthy_upstream")["request_id"] == "req-503"
    assert_no_internal_headers(reply)


def test_an_upstream_timeout_is_a_json_504(stack: GatewayStack) -> None:
    reply = stack.get("/slow?delay=2", headers={"x-request-id": "req-504"})
    assert gateway_error(reply, 504, "upstream_timeout")["request_id"] == "req-504"
    assert_no_internal_headers(reply)


def test_a_rate_limited_request_is_a_json_429_that_keeps_the_rate_limit_headers(
    make_stack: StackFactory, tmp_path: Path, redis: RedisServer  # noqa: F811
) -> None:
    routes = [limited("orders", "/orders", [{"key": "ip", "algorithm": "fixedWindow", "limit": 1, "window": "30s"}])]
    stack = start(make_stack, tmp_path, redis, routes)
    try:
        client = stack.gateway.client()
        settle(30, 5)  # both hits in one fixed window
        wait_for(lambda: client.request("/orders").headers.get("x-ratelimit-limit") == "1", 10, "rate-limit headers on /orders")
        reply = client.request("/orders", headers={"x-request-id": "req-429"})
        assert gateway_error(reply, 429, "rate_limited")["request_id"] == "req-429"
        assert reply.headers["x-ratelimit-limit"] == "1" and int(reply.headers["retry-after"]) >= 1, reply.headers
        assert_no_internal_headers(reply)
    finally:
        stack.stop()


def test_the_server_header_can_be_left_out(make_stack: StackFactory) -> None:
    stack = gateway_stack(make_stack, serverHeader="")
    reply = stack.get("/echo")
    assert reply.status == 200 and "server" not in reply.headers, reply.headers
    assert "server" not in stack.get("/no/such/route").headers


# --- envoy --mode validate over non-default settings (the golden cases cover the defaults) ----


def listener_bootstrap(settings: GatewaySettings) -> dict[str, Any]:
    [listener] = [resource_data(r) for r in RouteTranslator(settings).translate([]).listeners]
    hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
    del hcm["rds"]
    hcm["route_config"] = {"name": "gatehouse_http", "virtual_hosts": []}
    return {"static_resources": {"listeners": [listener]}}


@pytest.mark.parametrize(
    "settings",
    [
        GatewaySettings(max_request_headers_kb=8192, max_request_body_bytes=1 << 40, server_header="edge gateway/1"),
        GatewaySettings(max_request_headers_kb=1, max_request_body_bytes=0, server_header=""),
    ],
    ids=["large-limits-named-server", "no-body-limit-no-server-header"],
)
def test_the_hcm_passes_envoy_validate(settings: GatewaySettings, tmp_path: Path) -> None:
    path = write_bootstrap(listener_bootstrap(settings), tmp_path / "listener.yaml")
    result = validate_config(envoy_binary(), path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_envoy_checks_the_body_size_limit_it_is_given(tmp_path: Path) -> None:
    """The filter's message is registered by hand (xds-protos lacks it): Envoy really parses it."""
    bootstrap = listener_bootstrap(GatewaySettings())
    hcm = bootstrap["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    [body_limit] = [f for f in hcm["http_filters"] if f["name"] == BODY_SIZE_LIMIT_FILTER]
    body_limit["typed_config"]["max_request_bytes"] = "0"
    result = validate_config(envoy_binary(), write_bootstrap(bootstrap, tmp_path / "zero.yaml"))
    assert result.returncode != 0 and "max_request_bytes" in result.stdout + result.stderr, result.stdout + result.stderr


def test_an_unreachable_authorization_service_is_a_json_503(make_stack: StackFactory, refused_address: str) -> None:
    """Nothing listens where ext_authz should be: Envoy's own 503 gets the JSON body (the
    service's own denials keep theirs)."""
    stack = make_stack(upstreams=("svc-a",), control_plane_extra={"extAuthz": {"address": refused_address, "timeout": "200ms"}})
    stack.commit_routes(
        {
            "routes.yaml": [
                route_doc("public", {"match": {"pathPrefix": "/public"}, "backends": [{"service": "svc-a", "port": 8080}], "auth": {"required": False}}),
                route_doc("private", {"match": {"pathPrefix": "/private"}, "backends": [{"service": "svc-a", "port": 8080}]}),
            ]
        }
    )
    stack.start(wait_path="/public")
    reply = stack.get("/private", headers={"x-request-id": "req-authz-down"})
    assert gateway_error(reply, 503, "authorization_unavailable")["request_id"] == "req-authz-down"
