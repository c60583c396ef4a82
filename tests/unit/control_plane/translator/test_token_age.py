"""``auth.maxTokenAge`` in translation: the bound travels in the route's policy, and a
gateway whose check cannot read it refuses the route rather than serve it unbounded."""

from __future__ import annotations

import pytest

from control_plane.model import Origin, parse_route_file
from control_plane.translator import GatewaySettings, RouteTranslator
from control_plane.translator.ext_authz import ExtAuthzSettings
from servicekit.protos.gatehouse.policy.v1 import policy_pb2

ROUTES = """
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: payments, namespace: shop}
spec:
  match: {pathPrefix: /payments}
  backends: [{service: payments, port: 8080}]
  auth: {maxTokenAge: 5m}
---
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: orders, namespace: shop}
spec:
  match: {pathPrefix: /orders}
  backends: [{service: orders, port: 8080}]
"""
HTTP = GatewaySettings(ext_authz=ExtAuthzSettings((("127.0.0.1", 9196),), protocol="http"))


def test_the_bound_is_in_the_routes_policy_in_milliseconds_and_absent_elsewhere() -> None:
    routes, problems = parse_route_file(ROUTES, Origin("file", "routes.yaml"))
    assert problems == []
    translation = RouteTranslator(HTTP).translate(list(routes))
    policies = {r.name: policy_pb2.RoutePolicy.FromString(r.body) for r in translation.policies}
    assert policies["shop/payments"].auth.max_token_age_ms == 300_000
    assert policies["shop/orders"].auth.max_token_age_ms == 0


def test_over_grpc_the_route_is_refused_alone_and_says_which_protocol_decides_it() -> None:
    routes, _ = parse_route_file(ROUTES, Origin("file", "routes.yaml"))
    translator = RouteTranslator(GatewaySettings(ext_authz=ExtAuthzSettings((("127.0.0.1", 9191),), protocol="grpc")))
    translation = translator.translate(list(routes))
    assert [r.id for r in translation.model] == ["shop/orders"]
    problem = translator.quarantined["shop/payments"]
    assert "routes.yaml" in problem and "auth.maxTokenAge: decided in the HTTP authorization check" in problem
    assert "extAuthz.protocol: grpc" in problem


@pytest.mark.parametrize(
    ("auth", "reason"),
    [
        ("{required: false, maxTokenAge: 5m}", "maxTokenAge: a public route (required: false) checks no token"),
        ("{apiKeys: true, maxTokenAge: 5m}", "an API key has none"),
        ("{maxTokenAge: 500ms}", "maxTokenAge (500ms) must be from 1s to 24h"),
        ("{maxTokenAge: 25h}", "must be from 1s to 24h"),
        ("{maxTokenAge: soon}", "maxTokenAge"),
    ],
)
def test_a_bad_bound_is_a_clear_error_naming_the_file_and_field(auth: str, reason: str) -> None:
    text = ROUTES.replace("auth: {maxTokenAge: 5m}", f"auth: {auth}")
    routes, problems = parse_route_file(text, Origin("file", "routes.yaml"))
    assert [r.id for r in routes] == ["shop/orders"]
    assert len(problems) == 1 and reason in str(problems[0]) and "routes.yaml" in str(problems[0])
