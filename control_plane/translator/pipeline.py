"""The translator's entry points: ``RouteTranslator`` (routes in, every Envoy resource but
endpoints out) and ``EndpointTranslator`` (endpoint tables in, EDS out); a node group's own
listener comes from ``edge.edge_resources``.

Each route's Envoy entries are cached by route identity (an unchanged source document
yields the same Route object), so a commit that touches one route re-translates one
route, not ten thousand. The cache holds only the routes of the latest call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from google.protobuf.json_format import ParseError

from control_plane.breakers.board import BreakerState
from control_plane.cache.resource import Resource
from control_plane.cache.types import ResourceType
from control_plane.model.fall_through import FallThroughs
from control_plane.model.ordering import SortKey, specificity_key
from control_plane.model.route import Route
from control_plane.translator.breaker_phases import NO_BREAKERS, effective_phase, fallback_refs
from control_plane.translator.check_policy import check_policy
from control_plane.translator.clusters import ClusterPolicy, cluster, cluster_policies
from control_plane.translator.edge import edge_resources
from control_plane.translator.endpoints import Endpoint, EndpointTable, load_assignment
from control_plane.translator.http_filters import HTTP_FEATURES
from control_plane.translator.method_guard import Signature
from control_plane.translator.method_guard import guards as method_guards
from control_plane.translator.messages import Cluster, parse
from control_plane.translator import wire
from control_plane.translator.names import ROUTE_CONFIG_NAME, ClusterRef
from control_plane.translator.route_entries import cluster_refs, route_entries
from control_plane.translator.settings import GatewaySettings
from control_plane.translator.virtual_hosts import route_configuration
from control_plane.translator.variant_guard import variant_guards



UNENFORCEABLE = "Unenforceable"
"""A route asks for protection this gateway cannot enforce (a feature's ``refusals``)."""
UNTRANSLATABLE = "Invalid"
"""The translator could not build the route, or it contradicts another route's cluster policy."""
NOT_ENFORCED = "NotEnforced"
"""Served without something it asks for (a feature's ``unenforced``)."""
FALL_THROUGH = "PublicFallThrough"
"""Requests the route does not take (another method, a trailing slash) reach a public route."""


@dataclass(frozen=True, slots=True)
class RouteProblem:
    """What became of a route the translator did not serve as asked: refused (not in the
    configuration at all), or served with part of it not enforced (``served``)."""

    route: Route
    reason: str
    """The status condition's reason: ``Unenforceable``, ``Invalid``, or ``NotEnforced``."""
    message: str
    served: bool = False


def refusals(route: Route, settings: GatewaySettings) -> list[str]:
    """Everything the route asks for that this gateway cannot enforce (empty: servable)."""
    return [reason for feature in HTTP_FEATURES for reason in feature.refusals(route, settings)]


def unenforced(route: Route, settings: GatewaySettings) -> list[str]:
    """What the route is served without, by the operator's choice."""
    return [reason for feature in HTTP_FEATURES for reason in feature.unenforced(route, settings)]


@dataclass(frozen=True, slots=True)
class _Translated:
    """What the translator keeps per route between calls."""

    encoded: bytes
    """The route's Envoy entries, serialized as VirtualHost.routes records."""
    sort_key: SortKey
    refs: tuple[ClusterRef, ...]
    resources: tuple[Resource, ...]
    """What the features make of the route besides its entries (its rate-limit policy)."""
    fallback_refs: tuple[ClusterRef, ...] = ()
    """The fallback backend's cluster: emitted, but no cluster policy of the route's applies."""


def _translate_route(
    route: Route, settings: GatewaySettings, breaker: BreakerState | None, now: float
) -> _Translated:
    encoded = b"".join(
        wire.as_route_field(entry.SerializeToString(deterministic=True))
        for entry in route_entries(route, settings, breaker, now)
    )
    resources = tuple(r for feature in HTTP_FEATURES for r in feature.route_resources(route, settings))
    policy = check_policy(route, settings, HTTP_FEATURES)
    if policy is not None:
        resources = (policy, *resources)
    return _Translated(
        encoded, specificity_key(route), tuple(cluster_refs(route)), resources, tuple(fallback_refs(route))
    )


@dataclass(frozen=True)
class Translation:
    """Everything but endpoints; endpoints come from ``EndpointTranslator`` on their own path."""

    listeners: tuple[Resource, ...]
    routes: tuple[Resource, ...]
    clusters: tuple[Resource, ...]
    cluster_refs: tuple[ClusterRef, ...]
    model: tuple[Route, ...]
    policies: tuple[Resource, ...] = ()
    secrets: tuple[Resource, ...] = ()


class RouteTranslator:
    def __init__(self, settings: GatewaySettings, *, clock: Callable[[], float] = time.time) -> None:
        self._settings = settings
        self._clock = clock
        """Wall clock, as the board's: an OPEN route's Retry-After counts to its open_until."""
        self._entries: dict[tuple[Route, BreakerState | None], _Translated] = {}
        self._clusters: dict[tuple[ClusterRef, ClusterPolicy], Resource] = {}
        self._edge = edge_resources(settings)
        self._service_clusters = service_clusters(settings)
        self.translated_routes = 0
        """How many routes were translated (not served from cache), for tests and metrics."""
        self.problems: dict[str, RouteProblem] = {}
        """Routes of the last translation left out (refused, untranslatable) or served with
        something not enforced, by route id."""
        self._guards: dict[tuple[Signature, tuple[str, ...]], Route] = {}
        """``match.otherMethods: reject``'s 405 routes, kept while their paths are unchanged."""
        self._judged: dict[Route, RouteProblem | None] = {}
        """Each route's refusal or unenforced notes, kept while the route is unchanged. The
        translator logs nothing of them: the snapshot publisher logs each once it appears,
        and the CLI's offline commands print them their own way."""

    def _warn_fall_throughs(self, served: list[Route], guards: list[Route], problems: dict[str, RouteProblem]) -> None:
        """A served route that asks for a token and whose other methods or trailing slash
        reach a public route: served, with ``Enforced=False`` saying which (``fall_through``)."""
        if not any(r.spec.auth.required for r in served) or all(r.spec.auth.required for r in served):
            return  # nothing public to fall to, or nothing to protect
        index = FallThroughs([*served, *guards])
        for route in served:
            warnings = index.of(route)
            if not warnings:
                continue
            before = problems.get(route.id)
            message = "; ".join([*([before.message] if before is not None else []), *warnings])
            problems[route.id] = RouteProblem(route, before.reason if before is not None else FALL_THROUGH, message, served=True)

    @property
    def quarantined(self) -> dict[str, str]:
        """Routes left out of the last translation, and why ("origin: reason")."""
        return {rid: f"{p.route.origin}: {p.message}" for rid, p in self.problems.items() if not p.served}

    def _judge(self, route: Route) -> RouteProblem | None:
        if route in self._judged:
            return self._judged[route]
        refused = refusals(route, self._settings)
        if refused:
            return RouteProblem(route, UNENFORCEABLE, "; ".join(refused))
        notes = unenforced(route, self._settings)
        return RouteProblem(route, NOT_ENFORCED, "; ".join(notes), served=True) if notes else None

    def translate(self, routes: list[Route], breakers: Mapping[str, BreakerState] = NO_BREAKERS) -> Translation:
        """``breakers``: the board's states by route id, read-only; a route not in it is CLOSED."""
        translated: dict[Route, _Translated] = {}
        entries: dict[tuple[Route, BreakerState | None], _Translated] = {}
        problems: dict[str, RouteProblem] = {}
        judged: dict[Route, RouteProblem | None] = {}
        now = self._clock()
        for route in routes:
            problem = judged[route] = self._judge(route)
            if problem is not None:
                problems[route.id] = problem
                if not problem.served:
                    continue  # refused: never served with less protection than it asks for
            # Keyed by the phase too: a move re-translates that route alone.
            key = (route, effective_phase(route, breakers.get(route.id)))
            cached = self._entries.get(key)
            if cached is None:
                try:
                    cached = _translate_route(route, self._settings, key[1], now)
                except (ParseError, ValueError) as exc:
                    # A translator gap must cost one route, not the whole config.
                    problems[route.id] = RouteProblem(route, UNTRANSLATABLE, str(exc))
                    continue
                self.translated_routes += 1
            translated[route] = cached
            entries[key] = cached
        self._entries = entries
        self._judged = judged
        # Cluster-level fields (circuitBreaker, outlierDetection, healthCheck, timeouts.connect)
        # must agree between the routes sharing a cluster; a contradicting route is left out.
        policies, contradicting = cluster_policies(list(translated), {r: t.refs for r, t in translated.items()})
        for route, contradiction in contradicting.items():
            problems[route.id] = RouteProblem(route, UNTRANSLATABLE, contradiction)
        translated = {route: t for route, t in translated.items() if route not in contradicting}
        served = list(translated)
        guards = method_guards(served, self._guards)
        self._guards = {key: guard for key, guard in self._guards.items() if guard in guards}
        for guard in guards:
            key = (guard, None)
            cached = self._entries.get(key) or _translate_route(guard, self._settings, None, now)
            translated[guard] = self._entries[key] = cached
        self._warn_fall_throughs(served, guards, problems)
        # Letter-case and ';' spellings of a protected path that would reach a public route: 400, right after it.
        for route, refusing in variant_guards([*served, *guards], served, self._settings).items():
            translated[route] = replace(translated[route], encoded=translated[route].encoded + refusing)
        self.problems = problems
        ordered = sorted(translated, key=lambda route: translated[route].sort_key)

        users: dict[ClusterRef, list[str]] = {}
        for route in ordered:
            for ref in (*translated[route].refs, *translated[route].fallback_refs):
                users.setdefault(ref, []).append(route.id)
        refs = tuple(sorted(users))
        keys = [(ref, policies.get(ref, ClusterPolicy())) for ref in refs]
        self._clusters = {
            key: self._clusters.get(key) or Resource.from_message(ResourceType.CLUSTER, key[0].name, cluster(*key))
            for key in keys
        }
        clusters = tuple(
            Resource(
                r.type, r.name, r.body, r.version, provenance=tuple(sorted(users[key[0]])), references=(r.name,)
            )
            for key, r in self._clusters.items()
        ) + self._service_clusters
        body = route_configuration(ordered, {route: translated[route].encoded for route in ordered})
        route_resource = Resource.from_bytes(
            ResourceType.ROUTE,
            ROUTE_CONFIG_NAME,
            body,
            provenance=tuple(dict.fromkeys(route.id for route in ordered)),
            references=tuple(ref.name for ref in refs),
        )
        guarding = set(guards)
        return Translation(
            listeners=self._edge.listeners,
            routes=(route_resource,),
            clusters=clusters,
            cluster_refs=refs,
            model=tuple(route for route in ordered if route not in guarding),
            policies=tuple(r for t in translated.values() for r in t.resources if r.type is ResourceType.POLICY),
            secrets=self._edge.secrets,
        )


def service_clusters(settings: GatewaySettings) -> tuple[Resource, ...]:
    """Clusters for Gatehouse's own services (static addresses, no EDS), in feature order."""
    return tuple(
        Resource.from_message(ResourceType.CLUSTER, data["name"], parse(Cluster, data))
        for feature in HTTP_FEATURES
        for data in feature.clusters(settings)
    )


class EndpointTranslator:
    """Endpoint tables → EDS resources, rebuilding only clusters whose endpoints changed."""

    def __init__(self) -> None:
        self._cache: dict[ClusterRef, tuple[tuple[Endpoint, ...], Resource]] = {}

    def translate(self, refs: tuple[ClusterRef, ...], table: EndpointTable) -> list[Resource]:
        fresh: dict[ClusterRef, tuple[tuple[Endpoint, ...], Resource]] = {}
        for ref in refs:
            endpoints = table.endpoints_for(ref)
            cached = self._cache.get(ref)
            if cached is None or cached[0] != endpoints:
                assignment = load_assignment(ref, endpoints)
                cached = (endpoints, Resource.from_message(ResourceType.ENDPOINT, ref.name, assignment))
            fresh[ref] = cached
        self._cache = fresh
        return [resource for _, resource in fresh.values()]
