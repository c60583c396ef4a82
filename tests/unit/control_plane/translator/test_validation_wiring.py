"""``validate:`` beyond its golden case (testdata/in/validation.yaml): a route whose rules
Envoy could not deliver to the HTTP check is quarantined alone, with the reason; only
body rules buffer; the headers the check always sees are the ones the filter forwards."""

from __future__ import annotations

from typing import Any

import pytest

from control_plane.model import Origin, parse_route_file
from control_plane.translator import GatewaySettings, RouteTranslator
from control_plane.translator.check_headers import HTTP_FORWARDED_HEADERS
from control_plane.translator.ext_authz import ExtAuthzSettings
from control_plane.translator.settings import RateLimitSettings
from control_plane.translator.validation import ALWAYS_FORWARDED
from tests.unit.control_plane.translator.envoy_data import entries_by_route, filter_config

ROUTES = """\
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: checked, namespace: shop}
spec:
  match: {pathPrefix: /checked}
  backends: [{service: orders, port: 8080}]
  validate: {headers: [{name: x-client-id}], body: {allowedFields: [a]}}
---
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: plain, namespace: shop}
spec:
  auth: {required: false}
  match: {pathPrefix: /plain}
  backends: [{service: orders, port: 8080}]
"""


def routes(text: str = ROUTES) -> list[Any]:
    parsed, problems = parse_route_file(text, Origin("file", "routes.yaml"))
    assert problems == [], [str(p) for p in problems]
    return parsed


def http(**kwargs: Any) -> GatewaySettings:
    return GatewaySettings(
        ext_authz=ExtAuthzSettings((("127.0.0.1", 9191),), protocol="http", **kwargs),
        rate_limit=RateLimitSettings((("127.0.0.1", 8081),)),
    )


@pytest.mark.parametrize(
    ("settings", "reason"),
    [
        (GatewaySettings(), "the gateway has no extAuthz; set extAuthz.protocol: http (Helm: extAuthz.enabled=true"),
        (GatewaySettings(ext_authz=ExtAuthzSettings((("127.0.0.1", 9191),), protocol="grpc")), "extAuthz.protocol is grpc"),
        (http(), "validate.headers[0].name: x-client-id: the authorization check would never see this header; add x-client-id to extAuthz.forwardHeaders"),
    ],
    ids=["no-ext-authz", "grpc", "header-not-forwarded"],
)
def test_a_route_whose_rules_cannot_reach_the_check_is_quarantined_alone(settings: GatewaySettings, reason: str) -> None:
    translator = RouteTranslator(settings)
    translation = translator.translate(routes())
    assert list(translator.quarantined) == ["shop/checked"]
    assert "routes.yaml" in translator.quarantined["shop/checked"] and reason in translator.quarantined["shop/checked"]
    assert set(entries_by_route(translation)) == {"shop/plain"}, "the other route is served"


def test_only_a_route_with_a_body_rule_buffers_its_body() -> None:
    translator = RouteTranslator(http(forward_headers=("x-client-id",)))
    entries = entries_by_route(translator.translate(routes()))
    assert translator.quarantined == {}
    checked = entries["shop/checked"][0]["typed_per_filter_config"]["envoy.filters.http.ext_authz"]
    assert checked["check_settings"] == {"with_request_body": {"max_request_bytes": 65536}}, "allow_partial_message: false is the default"
    plain = entries["shop/plain"][0].get("typed_per_filter_config", {}).get("envoy.filters.http.ext_authz", {})
    assert "check_settings" not in plain, "no body is sent for a route without a body rule"


def test_a_disabled_route_validates_nothing() -> None:
    text = ROUTES.replace("  validate:", "  disabled: {status: 503}\n  auth: {required: false}\n  validate:", 1)
    translator = RouteTranslator(GatewaySettings())
    translator.translate(routes(text))
    assert translator.quarantined == {}, "a direct response has nothing to validate, so nothing to deliver"


def test_the_check_always_sees_what_the_filter_forwards() -> None:
    assert set(HTTP_FORWARDED_HEADERS) <= set(ALWAYS_FORWARDED)


def test_the_check_is_sent_the_content_type_a_body_rule_reads() -> None:
    """Without it the check could not tell a JSON body from a form (issue 24, item 5)."""
    translation = RouteTranslator(http(forward_headers=("x-client-id",))).translate(routes())
    config = filter_config(translation, "envoy.filters.http.ext_authz")
    assert {"exact": "content-type", "ignore_case": True} in config["allowed_headers"]["patterns"]
