"""Shedding by route ``priority``: which requests Envoy refuses first when it is overloaded.

Two mechanisms, both Envoy's own:

- **Upstream pools.** Envoy keeps two sets of circuit-breaker counters and connection
  pools per cluster: DEFAULT and HIGH. ``critical`` and ``high`` routes send their requests
  at HIGH priority, into a pool sized like the service's DEFAULT one (``circuitBreaker``).
  A flood of ``normal``/``low`` requests that fills the service's bulkhead is answered 503
  (``upstream_overflow``) while critical traffic to the same service keeps its own
  connections and request slots. Envoy has only these two priorities, so ``critical`` and
  ``high`` share the protected pool. The pools are counted apart: with both full, the
  service sees up to twice its ``circuitBreaker`` limits (documented for sizing).
- **A latency-driven concurrency limit for ``low`` routes** (``gateway.loadShedding``, off
  unless set). Envoy's adaptive concurrency filter sits in the chain and every route that
  is not ``low`` switches it off for itself (Envoy cannot switch a filter *on* per route
  without a per-route config, which this filter does not have), so the ``low`` routes,
  and requests that match no route, share one concurrency limit. Every
  ``concurrency_update_interval`` the limit is multiplied by (target × 1.25) / (the
  sampled latency percentile), kept within [0.5, 2], plus a square-root headroom, up to
  ``maxConcurrency``. When low-priority requests get slower than the target (the gateway
  or their upstreams are saturated), the limit falls and the excess gets 503
  (``overloaded``) at once, so they stop competing with the critical routes. The target
  is fixed (``fixed_value``): a periodically re-sampled minimum RTT would pin the limit to
  a handful of requests for a moment every minute.
"""

from __future__ import annotations

from typing import Any

from servicekit.durations import format_duration_ms
from control_plane.model.route import Route
from control_plane.translator.feature import HttpFeature
from control_plane.translator.settings import GatewaySettings
from control_plane.translator.settings import SheddingSettings as SheddingSettings

SHED_FILTER = "envoy.filters.http.adaptive_concurrency"
ADAPTIVE_CONCURRENCY_TYPE = "type.googleapis.com/envoy.extensions.filters.http.adaptive_concurrency.v3.AdaptiveConcurrency"
FILTER_CONFIG_TYPE = "type.googleapis.com/envoy.config.route.v3.FilterConfig"
PROTECTED = frozenset({"critical", "high"})
SHED_FIRST = frozenset({"low"})


def routing_priority(priority: str) -> str:
    return "HIGH" if priority in PROTECTED else "DEFAULT"


def shed_filter(settings: SheddingSettings) -> dict[str, Any]:
    return {
        "name": SHED_FILTER,
        "typed_config": {
            "@type": ADAPTIVE_CONCURRENCY_TYPE,
            "gradient_controller_config": {
                "sample_aggregate_percentile": {"value": settings.percentile},
                "concurrency_limit_params": {
                    "max_concurrency_limit": settings.max_concurrency,
                    "concurrency_update_interval": format_duration_ms(settings.update_interval_ms),
                },
                "min_rtt_calc_params": {
                    "fixed_value": format_duration_ms(settings.latency_target_ms),
                    "buffer": {"value": 25.0},
                },
            },
            "concurrency_limit_exceeded_status": {"code": 503},
        },
    }


def shed_exempt() -> dict[str, Any]:
    """Switches the limit off for one route (every route but the ``low`` ones)."""
    return {"@type": FILTER_CONFIG_TYPE, "disabled": True}


class LoadShedding(HttpFeature):
    """The upstream pool of every route (by its priority), and the limit on ``low`` routes."""

    name = SHED_FILTER

    def http_filter(self, settings: GatewaySettings) -> dict[str, Any] | None:
        return None if settings.shedding is None else shed_filter(settings.shedding)

    def per_route(self, route: Route, settings: GatewaySettings) -> dict[str, Any] | None:
        if settings.shedding is None or route.spec.priority in SHED_FIRST:
            return None
        return shed_exempt()

    def route_action(self, route: Route, settings: GatewaySettings) -> dict[str, Any]:
        priority = routing_priority(route.spec.priority)
        return {} if priority == "DEFAULT" else {"priority": priority}
