"""Rate limits beyond their golden case (testdata/in/ratelimit.yaml pins the filter, its
place after ext_authz, each limit's descriptor and the policies ratelimit_svc receives):
without a ratelimit service a route with limits is refused, unless the operator chose to
serve such routes unlimited; then nothing is wired, and the route says so."""

from __future__ import annotations

from control_plane.model import Origin, parse_route_file
from control_plane.translator import GatewaySettings, RouteTranslator, Translation
from control_plane.translator.settings import ExtAuthzSettings
from tests.unit.control_plane.translator.envoy_data import entries_by_route
from tests.unit.control_plane.translator.golden import IN_DIR


GRPC = ExtAuthzSettings((("127.0.0.1", 9191),), protocol="grpc")


def translate(settings: GatewaySettings) -> Translation:
    routes, problems = parse_route_file((IN_DIR / "ratelimit.yaml").read_bytes(), Origin("file", "ratelimit.yaml"))
    assert problems == []
    return RouteTranslator(settings).translate(routes)


def test_without_a_ratelimit_service_a_limited_route_is_refused() -> None:
    translator = RouteTranslator(GatewaySettings(ext_authz=GRPC))
    routes, _ = parse_route_file((IN_DIR / "ratelimit.yaml").read_bytes(), Origin("file", "ratelimit.yaml"))
    translation = translator.translate(routes)
    limited = {r.id for r in routes if r.spec.rate_limits and r.spec.disabled is None}
    assert limited and set(translator.quarantined) >= limited
    assert not limited & {r.id for r in translation.model}, "never served without its limits"
    for route_id in limited:
        assert "rateLimits: this gateway has no rate-limit service" in translator.quarantined[route_id]
        assert "rateLimitsWithoutLimiter: serveUnlimited" in translator.quarantined[route_id]


def test_serve_unlimited_serves_without_limits_and_says_so() -> None:
    translator = RouteTranslator(GatewaySettings(ext_authz=GRPC, serve_unlimited=True))
    routes, _ = parse_route_file((IN_DIR / "ratelimit.yaml").read_bytes(), Origin("file", "ratelimit.yaml"))
    translation = translator.translate(routes)
    assert translator.quarantined == {}
    notes = {rid: p.message for rid, p in translator.problems.items() if p.served}
    assert notes and all(m.startswith("rateLimits: not enforced") for m in notes.values())
    assert translation.policies == ()
    entries = [e for route_entries in entries_by_route(translation).values() for e in route_entries]
    assert entries and all("rate_limits" not in e.get("route", {}) for e in entries)
    entries = [e for route_entries in entries_by_route(translation).values() for e in route_entries]
    assert entries and all("rate_limits" not in e.get("route", {}) for e in entries)
