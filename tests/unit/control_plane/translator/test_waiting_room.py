"""A route's waiting room in the translator, beyond its golden case (testdata/in/waiting_room.yaml):
a room no check here would decide quarantines its route (and only it), a public route's
room is checked by the first, fail-closed ext_authz filter, and the room's fields reach
its RoutePolicy."""

from __future__ import annotations

from typing import Any

import pytest

from control_plane.model import Origin, parse_route_file
from control_plane.translator import GatewaySettings, RouteTranslator
from control_plane.translator.ext_authz import EXT_AUTHZ_FILTER, PUBLIC_LIMITS_FILTER, ExtAuthzSettings
from control_plane.translator.settings import RateLimitSettings
from servicekit.protos.gatehouse.policy.v1 import policy_pb2
from tests.unit.control_plane.translator.envoy_data import entries_by_route

ROUTES = """\
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: launch, namespace: shop}
spec:
  match: {pathPrefix: /launch}
  backends: [{service: web, port: 8080}]
  auth: {required: false}
  rateLimits: [{key: ip, limit: 10, window: 1s}]
  waitingRoom: {admitPerSecond: 50, maxWaiting: 500, ticketTtl: 20s, onStoreFailure: open}
---
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: plain, namespace: shop}
spec:
  auth: {required: false}
  match: {pathPrefix: /plain}
  backends: [{service: web, port: 8080}]
"""
HTTP = ExtAuthzSettings((("127.0.0.1", 9196),), protocol="http")
RATE_LIMIT = RateLimitSettings((("127.0.0.1", 8081),))


def translator(settings: GatewaySettings) -> tuple[RouteTranslator, Any]:
    routes, problems = parse_route_file(ROUTES, Origin("file", "routes.yaml"))
    assert problems == []
    translator = RouteTranslator(settings)
    return translator, translator.translate(routes)


@pytest.mark.parametrize(
    "settings",
    [GatewaySettings(), GatewaySettings(ext_authz=ExtAuthzSettings((("127.0.0.1", 9191),), protocol="grpc"))],
    ids=["no-ext-authz", "grpc"],
)
def test_a_room_no_check_decides_quarantines_its_route_only(settings: GatewaySettings) -> None:
    found, translation = translator(settings)
    assert set(found.quarantined) == {"shop/launch"}
    assert "routes.yaml" in found.quarantined["shop/launch"]
    assert "waitingRoom: the room is decided in the HTTP authorization check" in found.quarantined["shop/launch"]
    assert "set extAuthz.protocol: http (Helm: extAuthz.enabled=true, extAuthz.protocol=http)" in found.quarantined["shop/launch"]
    assert [r.id for r in translation.model] == ["shop/plain"]


def test_a_public_room_is_checked_by_the_fail_closed_filter_with_its_limits() -> None:
    found, translation = translator(GatewaySettings(ext_authz=HTTP, rate_limit=RATE_LIMIT))
    assert found.quarantined == {}
    [entry] = entries_by_route(translation)["shop/launch"]
    per_filter = entry.get("typed_per_filter_config", {})
    assert EXT_AUTHZ_FILTER not in per_filter, "the first ext_authz filter stays on"
    assert PUBLIC_LIMITS_FILTER not in per_filter, "the fail-open second one stays off"
    assert "rate_limits" not in entry["route"], "its limits are decided in the same check"
    assert "x-gatehouse-ticket" in entry["request_headers_to_remove"]
    [policy] = [policy_pb2.RoutePolicy.FromString(r.body) for r in translation.policies if r.name == "shop/launch"]
    assert policy.auth.public and [limit.key for limit in policy.limits] == ["ip"]
    assert (policy.waiting_room.admit_per_second, policy.waiting_room.max_waiting) == (50, 500)
    assert (policy.waiting_room.ticket_ttl_ms, policy.waiting_room.on_store_failure) == (20_000, "open")
