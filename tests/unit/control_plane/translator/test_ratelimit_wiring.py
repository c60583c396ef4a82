"""Rate limits beyond their golden case (testdata/in/ratelimit.yaml pins the filter, its
place after ext_authz, each limit's descriptor and the policies ratelimit_svc receives):
without a ratelimit service, nothing is wired."""

from __future__ import annotations

from control_plane.model import Origin, parse_route_file
from control_plane.translator import GatewaySettings, RouteTranslator, Translation
from tests.unit.control_plane.translator.envoy_data import entries_by_route
from tests.unit.control_plane.translator.golden import IN_DIR


def translate(settings: GatewaySettings) -> Translation:
    routes, problems = parse_route_file((IN_DIR / "ratelimit.yaml").read_bytes(), Origin("file", "ratelimit.yaml"))
    assert problems == []
    return RouteTranslator(settings).translate(routes)


def test_without_a_ratelimit_service_nothing_is_wired() -> None:
    translation = translate(GatewaySettings())
    assert translation.ratelimits == ()
    entries = [e for route_entries in entries_by_route(translation).values() for e in route_entries]
    assert entries and all("rate_limits" not in e.get("route", {}) for e in entries)
