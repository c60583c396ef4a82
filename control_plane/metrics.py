"""The control plane's Prometheus metrics, declared once."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

CONNECTED_PROXIES = Gauge("gatehouse_xds_connected_proxies", "Envoy streams currently open", ["protocol"])
PUSHES = Counter("gatehouse_xds_pushes_total", "xDS responses sent", ["type"])
ACKS = Counter("gatehouse_xds_acks_total", "xDS responses Envoy accepted", ["type"])
NACKS = Counter("gatehouse_xds_nacks_total", "xDS responses Envoy rejected", ["type"])
CHANGE_TO_PUSH = Histogram(
    "gatehouse_xds_change_to_push_seconds",
    "Time from a source change being seen to the first push that carries it",
    ["type"],
    buckets=_LATENCY_BUCKETS,
)
PUSH_TO_ACK = Histogram(
    "gatehouse_xds_push_to_ack_seconds", "Time from a push to Envoy's ACK", ["type"], buckets=_LATENCY_BUCKETS
)
OLDEST_UNACKED_PUSH = Gauge(
    "gatehouse_xds_oldest_unacked_push_seconds",
    "Age of the oldest push some connected proxy has not ACKed (refused or slow); 0 when all are current",
    ["type"],
)
SNAPSHOTS = Counter("gatehouse_snapshots_total", "Snapshots published", ["reason"])
ROUTES_TRANSLATED = Counter("gatehouse_routes_translated_total", "Routes translated (cache misses)")
TRANSLATIONS = Counter("gatehouse_translations_total", "Full route translations run")
SOURCE_SYNCS = Counter("gatehouse_source_syncs_total", "Source sync attempts", ["source", "result"])
SOURCE_REJECTIONS = Counter(
    "gatehouse_source_rejections_total", "Source revisions refused because they were invalid", ["source"]
)
ROUTES_LOADED = Gauge("gatehouse_routes", "Routes in the live model", ["source"])
ROUTES_REFUSED = Gauge(
    "gatehouse_routes_refused",
    "Routes left out of the configuration: Unenforceable (they ask for protection this gateway cannot "
    "enforce) or Invalid (the translator could not build them)",
    ["reason"],
)
ROUTES_NOT_ENFORCED = Gauge(
    "gatehouse_routes_not_enforced",
    "Routes served without a field they set, by the operator's choice or for want of its feed "
    "(rateLimits without a limiter, circuitBreaker.errorRate without tallies), or whose other "
    "methods or trailing slash fall through to a public route (fallThrough)",
    ["field"],
)
ENDPOINTS_REFUSED = Counter(
    "gatehouse_endpoints_refused_total",
    "EndpointSlices (what=slice) or their addresses (what=address) not used: not written by a "
    "trusted manager for that kind of Service, or an address outside what may receive traffic",
    ["what"],
)
