"""Backend service ports → EDS clusters fed over ADS, with their resilience settings.

A cluster is one service port, shared by every route that sends traffic to it, so the
cluster-level fields of those routes (``circuitBreaker``, ``outlierDetection``,
``healthCheck``, ``timeouts.connect``, ``backPressure``) must agree. Routes that leave a field unset take
whatever the others set. When two routes set different values, the route that ranks
first as in route conflicts (a Git route over a Kubernetes one, then the older object,
then the smaller namespace/name) keeps the cluster; the other is quarantined with a
message naming both, so a new route can never change a running service's settings.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, TypeVar

from control_plane.model.conflicts import _precedence
from servicekit.durations import format_duration_ms, human_duration_ms
from control_plane.model.route import Route
from control_plane.model.back_pressure import BackPressure
from control_plane.model.circuit_breaker import CircuitBreaker
from control_plane.model.health_check import HealthCheck
from control_plane.model.outlier_detection import OutlierDetection
from control_plane.model.timeouts import CONNECT_TIMEOUT_MS
from control_plane.translator.back_pressure import UPSTREAM_CODEC_FILTER, UPSTREAM_CODEC_TYPE, upstream_http_filters
from control_plane.translator.messages import Cluster, parse
from control_plane.translator.names import ClusterRef
from control_plane.translator.cache_key import host_filter
from control_plane.translator.response_cache import cache_ttl_filter

CONNECT_TIMEOUT = format_duration_ms(CONNECT_TIMEOUT_MS)
RETRY_BUDGET_PERCENT = 20.0
"""Retries may add at most this share of the cluster's active requests..."""
RETRY_BUDGET_MIN_CONCURRENCY = 3
"""...but at least this many concurrent retries, so a quiet service can still retry."""

T = TypeVar("T")
_FIELDS = ("circuitBreaker", "outlierDetection", "healthCheck", "timeouts.connect", "backPressure")
HTTP_PROTOCOL_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
HTTP_PROTOCOL_OPTIONS_TYPE = f"type.googleapis.com/{HTTP_PROTOCOL_OPTIONS}"


@dataclass(frozen=True, slots=True)
class ClusterPolicy:
    """What the routes using one cluster set on it; None is "not set by any route"."""

    connect_timeout_ms: int | None = None
    circuit_breaker: CircuitBreaker | None = None
    outlier_detection: OutlierDetection | None = None
    health_check: HealthCheck | None = None
    back_pressure: BackPressure | None = None
    cache: bool = False
    """A route with ``cache`` uses it: its upstream chain gives answers the route's
    freshness (``response_cache``). Inert for the other routes, so they need not agree."""


DEFAULT_POLICY = ClusterPolicy()


def _route_values(route: Route) -> dict[str, object]:
    spec = route.spec
    bulkhead = spec.circuit_breaker
    if bulkhead is not None and bulkhead.error_rate is not None:
        # errorRate is the route's own breaker, not a cluster setting (and holds a list,
        # which would make the cluster key unhashable).
        bulkhead = bulkhead.model_copy(update={"error_rate": None})
        if bulkhead == type(bulkhead)():
            bulkhead = None
    values: dict[str, object | None] = {
        "circuitBreaker": bulkhead,
        "outlierDetection": spec.outlier_detection,
        "healthCheck": spec.health_check,
        "timeouts.connect": spec.timeouts.connect,
        "backPressure": spec.back_pressure,
    }
    return {key: value for key, value in values.items() if value is not None}


def _shown(field: str, value: object) -> str:
    if isinstance(value, int):
        return human_duration_ms(value)
    assert hasattr(value, "model_dump")
    return str(value.model_dump(by_alias=True, exclude_none=True))


def _held(held: dict[str, tuple[object, Route]], field: str, kind: type[T]) -> T | None:
    claim = held.get(field)
    if claim is None:
        return None
    assert isinstance(claim[0], kind)
    return claim[0]


def cluster_policies(
    routes: list[Route], refs_of: dict[Route, tuple[ClusterRef, ...]]
) -> tuple[dict[ClusterRef, ClusterPolicy], dict[Route, str]]:
    """Each cluster's merged settings, and the routes whose settings contradict a cluster's.

    Deterministic whatever the input order: routes are taken in conflict precedence.
    """
    claims: dict[ClusterRef, dict[str, tuple[object, Route]]] = {}
    rejected: dict[Route, str] = {}
    for route in sorted((r for r in routes if refs_of.get(r)), key=_precedence):
        values = _route_values(route)
        if not values:
            continue
        problem = None
        for ref in refs_of[route]:
            held = claims.get(ref, {})
            for field, value in values.items():
                if field in held and held[field][0] != value:
                    other_value, other = held[field]
                    problem = (
                        f"{field} for {ref.name} is {_shown(field, value)} here but "
                        f"{_shown(field, other_value)} in {other.id} ({other.origin}); "
                        f"routes to the same service port must agree on {', '.join(_FIELDS)}"
                    )
                    break
            if problem:
                break
        if problem:
            rejected[route] = problem
            continue
        for ref in refs_of[route]:
            held = claims.setdefault(ref, {})
            for field, value in values.items():
                held.setdefault(field, (value, route))
    policies = {}
    for ref, held in claims.items():
        policies[ref] = ClusterPolicy(
            connect_timeout_ms=_held(held, "timeouts.connect", int),
            circuit_breaker=_held(held, "circuitBreaker", CircuitBreaker),
            outlier_detection=_held(held, "outlierDetection", OutlierDetection),
            health_check=_held(held, "healthCheck", HealthCheck),
            back_pressure=_held(held, "backPressure", BackPressure),
        )
    for route in routes:
        if route.spec.cache is not None and route not in rejected:
            for ref in refs_of.get(route, ()):
                policies[ref] = replace(policies.get(ref, DEFAULT_POLICY), cache=True)
    return policies, rejected


def _thresholds(breaker: CircuitBreaker | None, priority: str) -> dict[str, Any]:
    thresholds: dict[str, Any] = {"priority": priority}
    if breaker is not None:
        for field, key in (
            ("max_connections", "max_connections"),
            ("max_pending_requests", "max_pending_requests"),
            ("max_requests", "max_requests"),
            ("max_retries", "max_retries"),
        ):
            value = getattr(breaker, field)
            if value is not None:
                thresholds[key] = value
    if breaker is None or breaker.max_retries is None:
        # A budget, not a fixed count: retries can never multiply load during an outage.
        thresholds["retry_budget"] = {
            "budget_percent": {"value": RETRY_BUDGET_PERCENT},
            "min_retry_concurrency": RETRY_BUDGET_MIN_CONCURRENCY,
        }
    return thresholds


def _outlier_detection(outlier: OutlierDetection) -> dict[str, Any]:
    data: dict[str, Any] = {}
    if outlier.consecutive5xx is not None:
        data["consecutive_5xx"] = outlier.consecutive5xx
    if outlier.interval is not None:
        data["interval"] = format_duration_ms(outlier.interval)
    if outlier.base_ejection is not None:
        data["base_ejection_time"] = format_duration_ms(outlier.base_ejection)
    if outlier.max_ejection_percent is not None:
        data["max_ejection_percent"] = outlier.max_ejection_percent
    if outlier.failure_percentage is not None:
        failure = outlier.failure_percentage
        data["failure_percentage_threshold"] = failure.threshold
        data["enforcing_failure_percentage"] = 100  # Envoy's default, 0, only counts
        data["failure_percentage_minimum_hosts"] = failure.minimum_hosts
        data["failure_percentage_request_volume"] = failure.request_volume
    if outlier.success_rate is not None:
        rate = outlier.success_rate
        data["success_rate_stdev_factor"] = round(rate.stdev_factor * 1000)  # Envoy: factor × 1000
        data["enforcing_success_rate"] = 100
        data["success_rate_minimum_hosts"] = rate.minimum_hosts
        data["success_rate_request_volume"] = rate.request_volume
    return data


def _health_check(check: HealthCheck) -> dict[str, Any]:
    return {
        "timeout": format_duration_ms(check.timeout),
        "interval": format_duration_ms(check.interval),
        "healthy_threshold": check.healthy_threshold,
        "unhealthy_threshold": check.unhealthy_threshold,
        # Envoy checks an idle cluster only every 60 s; `interval` means what it says.
        "no_traffic_interval": format_duration_ms(check.interval),
        "http_health_check": {"path": check.path},
    }


def cluster_stat_name(ref: ClusterRef) -> str:
    """``<namespace>_<service>_<port>``: no '.', at which Envoy's ``envoy.cluster_name`` stat
    tag would cut the name (Prometheus would see ``envoy_cluster_<service>_<port>_...``), and
    no ':' or '/', which statsd and Graphite sinks split on. Namespaces and service names are
    DNS labels (no '_'), so the name is unambiguous."""
    return f"{ref.namespace}_{ref.service}_{ref.port}"


def cluster(ref: ClusterRef, policy: ClusterPolicy = DEFAULT_POLICY) -> Cluster:
    connect = policy.connect_timeout_ms if policy.connect_timeout_ms is not None else CONNECT_TIMEOUT_MS
    data: dict[str, Any] = {
        "name": ref.name,
        "type": "EDS",
        "eds_cluster_config": {"eds_config": {"ads": {}, "resource_api_version": "V3"}},
        "connect_timeout": format_duration_ms(connect),
        "lb_policy": "ROUND_ROBIN",
        "alt_stat_name": cluster_stat_name(ref),
        # The same bulkhead twice: DEFAULT for normal/low routes, HIGH for critical/high ones,
        # so a flood of the first cannot take the second's slots (load_shedding.py).
        "circuit_breakers": {
            "thresholds": [_thresholds(policy.circuit_breaker, p) for p in ("DEFAULT", "HIGH")]
        },
    }
    if policy.outlier_detection is not None:
        data["outlier_detection"] = _outlier_detection(policy.outlier_detection)
    if policy.health_check is not None:
        data["health_checks"] = [_health_check(policy.health_check)]
    if policy.back_pressure is not None or policy.cache:
        # HTTP/1.1 as without options; the upstream filter chain carries the throttling
        # and the cached routes' freshness.
        filters = (
            upstream_http_filters(policy.back_pressure)
            if policy.back_pressure is not None
            else [{"name": UPSTREAM_CODEC_FILTER, "typed_config": {"@type": UPSTREAM_CODEC_TYPE}}]
        )
        if policy.cache:
            # First: it sees the answer last, after admission control has counted it. Then
            # the client's host back on a per-user entry's request (cache_key).
            filters = [cache_ttl_filter(), host_filter(), *filters]
        data["typed_extension_protocol_options"] = {
            HTTP_PROTOCOL_OPTIONS: {
                "@type": HTTP_PROTOCOL_OPTIONS_TYPE,
                "explicit_http_config": {"http_protocol_options": {}},
                "http_filters": filters,
            }
        }
    return parse(Cluster, data)
