"""API keys on the Envoy side beyond the golden case (testdata/in/api_keys.yaml): a route
with ``apiKeys`` that no HTTP check would read is quarantined with a message naming the
field and the reason, and the other routes keep serving."""

from __future__ import annotations

import pytest

from control_plane.model import Origin, parse_route_file
from control_plane.translator import GatewaySettings, RouteTranslator
from control_plane.translator.ext_authz import ExtAuthzSettings

ROUTES = """\
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: partners, namespace: shop}
spec:
  match: {pathPrefix: /partners}
  backends: [{service: orders, port: 8080}]
  auth: {apiKeys: true}
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
        (GatewaySettings(ext_authz=ExtAuthzSettings((("127.0.0.1", 9191),), protocol="grpc")),
         "auth.apiKeys: needs extAuthz.protocol: http (this gateway uses grpc)"),
        (GatewaySettings(), "auth: the route requires a token or an API key, and this gateway has no authorization check"),
    ],
    ids=["grpc", "no-ext-authz"],
)
def test_keys_no_http_check_reads_quarantine_their_route_only(settings: GatewaySettings, reason: str) -> None:
    routes, problems = parse_route_file(ROUTES, Origin("file", "routes.yaml"))
    assert problems == []
    translator = RouteTranslator(settings)
    translation = translator.translate(routes)
    assert list(translator.quarantined) == ["shop/partners"]
    assert translator.quarantined["shop/partners"].startswith("file:routes.yaml:1: ")
    assert reason in translator.quarantined["shop/partners"]
    assert [route.id for route in translation.model] == ["shop/orders"], "the other route keeps serving"


def test_the_access_log_never_asks_envoy_for_the_key_header() -> None:
    from servicekit.access_log_contract import LOGGED_REQUEST_HEADERS

    assert "x-api-key" not in LOGGED_REQUEST_HEADERS and "x-user-id" in LOGGED_REQUEST_HEADERS, "the consumer, never the key"
