"""Token swap in Envoy's config beyond its golden case (testdata/in/upstream_token.yaml):
a swap route the gateway cannot honour is quarantined alone, and the one local-reply
mapper that rewrites an ext_authz denial matches only token swap's 424."""

from __future__ import annotations

import pytest

from control_plane.model import Origin, parse_route_file
from control_plane.translator import GatewaySettings, RouteTranslator
from control_plane.translator.ext_authz import ExtAuthzSettings
from control_plane.translator.local_replies import GATEWAY_ERRORS, mapper
from ext_authz.swap.tokens import UNAVAILABLE_HEADER, UNAVAILABLE_STATUS

ROUTES = """
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: billing, namespace: legacy}
spec:
  match: {pathPrefix: /billing}
  backends: [{service: billing, port: 8080}]
  auth: {upstreamToken: {audience: legacy-billing}}
---
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: orders, namespace: shop}
spec:
  auth: {required: false}
  match: {pathPrefix: /orders}
  backends: [{service: orders, port: 8080}]
"""


@pytest.mark.parametrize(
    ("settings", "reason"),
    [
        (GatewaySettings(ext_authz=ExtAuthzSettings((("127.0.0.1", 9191),), protocol="grpc")), "auth.upstreamToken: needs extAuthz.protocol: http (the gateway has extAuthz.protocol: grpc); without it the client's own token"),
        (GatewaySettings(), "auth: the route requires a token, and this gateway has no authorization check"),
        (GatewaySettings(ext_authz=ExtAuthzSettings((("127.0.0.1", 9196),), protocol="http", fail_open=True)), "auth.upstreamToken: the gateway has extAuthz.failOpen: true, which lets a request through with the client's own token"),
    ],
    ids=["grpc", "no-ext-authz", "fail-open"],
)
def test_a_swap_route_without_the_http_check_is_quarantined_and_the_others_serve(settings: GatewaySettings, reason: str) -> None:
    routes, problems = parse_route_file(ROUTES, Origin("file", "routes.yaml"))
    assert problems == []
    translator = RouteTranslator(settings)
    translation = translator.translate(list(routes))
    assert [r.id for r in translation.model] == ["shop/orders"]
    problem = translator.quarantined["legacy/billing"]
    assert "routes.yaml" in problem and reason in problem


def test_over_http_the_swap_route_is_served_and_its_policy_names_the_audience() -> None:
    routes, _ = parse_route_file(ROUTES, Origin("file", "routes.yaml"))
    translation = RouteTranslator(GatewaySettings(ext_authz=ExtAuthzSettings((("127.0.0.1", 9196),), protocol="http"))).translate(list(routes))
    assert sorted(r.id for r in translation.model) == ["legacy/billing", "shop/orders"]
    assert {r.name for r in translation.policies} == {"legacy/billing"}, "the public route has nothing to check"


def test_the_unavailable_mapper_matches_token_swaps_424_only() -> None:
    (error,) = [e for e in GATEWAY_ERRORS if e.code == "upstream_token_unavailable"]
    data = mapper(error)
    expression = data["filter"]["extension_filter"]["typed_config"]["expression"]
    assert "startsWith('ext_authz_denied')" in expression
    assert f"response.code == {UNAVAILABLE_STATUS}" in expression and f"'{UNAVAILABLE_HEADER}' in response.headers" in expression
    assert data["status_code"] == 503
