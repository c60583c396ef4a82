"""A HALF_OPEN breaker's non-probes get the route's own fallback, decided in Envoy alone.

The probe bucket (breaker_phases.probe_budget) runs in shadow mode on a route whose
fallback is a ``response`` or a ``backend``: it denies nothing, but marks each request
over the budget with ``x-gatehouse-breaker: half-open``. The next filter, Envoy's
``set_filter_state`` with ``clear_route_cache`` (inert in every listener, on only on such
a HALF_OPEN route), makes Envoy match the route again; ahead of each of the route's
entries sits a copy of it as OPEN answers it (static response, or the fallback backend's
cluster) that matches only that mark, so a non-probe gets exactly the OPEN fallback: its
status, headers and body, or the fallback backend's own answer, method and body kept.
A probe carries no mark and matches the route's entry again.

Why not Envoy's ``custom_response`` filter (matched on the bucket's 503): its redirect
policy turns every redirected request into a bodiless GET and answers with the original
503 (or one fixed status) whatever the fallback backend said; its API is work in progress.

Everything here is per route (``typed_per_filter_config``, route entries): a breaker move
stays an RDS change. The filter itself is in every listener's chain, disabled.
"""

from __future__ import annotations

from typing import Any

from control_plane.model.route import Route
from control_plane.translator.feature import HttpFeature
from control_plane.translator.local_replies import BREAKER_HEADER
from control_plane.translator.settings import GatewaySettings

REROUTE_FILTER = "gatehouse.breaker_reroute"
SET_FILTER_STATE_TYPE = "type.googleapis.com/envoy.extensions.filters.http.set_filter_state.v3.Config"
TYPED_STRUCT_TYPE = "type.googleapis.com/xds.type.v3.TypedStruct"
FILTER_CONFIG_TYPE = "type.googleapis.com/envoy.config.route.v3.FilterConfig"
NON_PROBE = "half-open"
"""The mark's value: the bucket's on a non-probe, the fallback's on its answer."""


def reroutes(route: Route) -> bool:
    """A HALF_OPEN non-probe of this route is sent to its fallback (else circuit_open)."""
    fallback = route.spec.fallback
    return fallback is not None and (fallback.response is not None or fallback.backend is not None)


def reroute_filter() -> dict[str, Any]:
    """Disabled: a route turns it on (``enable_reroute``) only while HALF_OPEN.

    A ``TypedStruct``: xds-protos 1.85 lacks ``clear_route_cache`` (Envoy 1.40 has it and
    converts the struct itself). ParseDict cannot check the struct's fields, so
    ``envoy --mode validate`` does (test_envoy_validate: it refuses a misspelt one)."""
    return {
        "name": REROUTE_FILTER,
        "disabled": True,
        "typed_config": {
            "@type": TYPED_STRUCT_TYPE,
            "type_url": SET_FILTER_STATE_TYPE,
            "value": {"clear_route_cache": True},
        },
    }


def enable_reroute() -> dict[str, Any]:
    """The route's ``typed_per_filter_config`` entry that turns the filter on."""
    return {"@type": FILTER_CONFIG_TYPE, "disabled": False, "config": {"@type": SET_FILTER_STATE_TYPE}}


def _mark() -> dict[str, Any]:
    return {"header": {"key": BREAKER_HEADER, "value": NON_PROBE}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}


def shadow(budget: dict[str, Any]) -> dict[str, Any]:
    """The probe bucket, never enforced: a request over it is marked and goes on."""
    enforced = {**budget["filter_enforced"], "default_value": {"numerator": 0, "denominator": "HUNDRED"}}
    return {**budget, "filter_enforced": enforced, "request_headers_to_add_when_not_enforced": [_mark()]}


def non_probe_entry(fallback_entry: dict[str, Any]) -> dict[str, Any]:
    """A fallback route entry (its JSON form, in place) → the one a marked non-probe
    matches: the same match plus the mark."""
    match = fallback_entry["match"]
    match["headers"] = [*match.get("headers", []), {"name": BREAKER_HEADER, "string_match": {"exact": NON_PROBE}}]
    return fallback_entry


BREAKER_NOT_FED = (
    "circuitBreaker.errorRate: the breaker cannot open by itself: no tallies reach it (the control plane "
    "needs accessLog, to the telemetry service, and breakers.tallyCredentialFile; Helm: telemetry.enabled=true "
    "with breakers.enabled=true); operators can still open and close it"
)


class BreakerReroute(HttpFeature):
    name = REROUTE_FILTER

    def http_filter(self, settings: GatewaySettings) -> dict[str, Any] | None:
        return reroute_filter()

    def unenforced(self, route: Route, settings: GatewaySettings) -> list[str]:
        breaker = route.spec.circuit_breaker
        if breaker is None or breaker.error_rate is None or settings.breaker_detection:
            return []
        return [BREAKER_NOT_FED]
