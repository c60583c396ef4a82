"""The translator's one entry point: routes in, Envoy resources out.

Each route's Envoy entries are cached by route identity (an unchanged source document
yields the same Route object), so a commit that touches one route re-translates one
route, not ten thousand. The cache holds only the routes of the latest call.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog
from google.protobuf.json_format import ParseError

from control_plane.cache.resource import Resource
from control_plane.cache.types import ResourceType
from control_plane.model.ordering import SortKey, specificity_key
from control_plane.model.route import Route
from control_plane.translator.access_log import access_log_cluster
from control_plane.translator.clusters import ClusterPolicy, cluster, cluster_policies
from control_plane.translator.ext_authz import ext_authz_cluster
from control_plane.translator.coverage import unenforced
from control_plane.translator.endpoints import Endpoint, EndpointTable, load_assignment
from control_plane.translator.listeners import http_listener
from control_plane.translator.messages import Cluster, Secret, parse
from control_plane.translator import wire
from control_plane.translator.names import LISTENER_NAME, ROUTE_CONFIG_NAME, ClusterRef
from control_plane.translator.ratelimit import ratelimit_cluster, route_policy
from control_plane.translator.routes import cluster_refs, route_configuration, route_entries
from control_plane.translator.settings import GatewaySettings
from control_plane.translator.tls import SECRET_NAME, tls_secret

log = structlog.get_logger(component="translator")


@dataclass(frozen=True, slots=True)
class _Translated:
    """What the translator keeps per route between calls."""

    encoded: bytes
    """The route's Envoy entries, serialized as VirtualHost.routes records."""
    sort_key: SortKey
    refs: tuple[ClusterRef, ...]
    policy: Resource | None
    """The route's rate-limit policy for ratelimit_svc, if it has limits and the service is configured."""


def _translate_route(route: Route, settings: GatewaySettings) -> _Translated:
    encoded = b"".join(
        wire.as_route_field(entry.SerializeToString(deterministic=True)) for entry in route_entries(route, settings)
    )
    policy = None
    if settings.rate_limit is not None and route.spec.rate_limits and route.spec.disabled is None:
        policy = Resource.from_message(ResourceType.RATELIMIT, route.id, route_policy(route))
    return _Translated(encoded, specificity_key(route), tuple(cluster_refs(route)), policy)


@dataclass(frozen=True)
class Translation:
    """Everything but endpoints; endpoints come from ``endpoint_resources`` on their own path."""

    listeners: tuple[Resource, ...]
    routes: tuple[Resource, ...]
    clusters: tuple[Resource, ...]
    cluster_refs: tuple[ClusterRef, ...]
    model: tuple[Route, ...]
    ratelimits: tuple[Resource, ...] = ()
    secrets: tuple[Resource, ...] = ()


class RouteTranslator:
    def __init__(self, settings: GatewaySettings) -> None:
        self._settings = settings
        self._entries: dict[Route, _Translated] = {}
        self._clusters: dict[tuple[ClusterRef, ClusterPolicy], Resource] = {}
        self._listener = listener_resource(settings)
        self._secrets = secret_resources(settings)
        self._service_clusters = service_clusters(settings)
        self.translated_routes = 0
        """How many routes were translated (not served from cache), for tests and metrics."""
        self.quarantined: dict[str, str] = {}
        """Routes left out of the last translation because they could not be translated, and why."""

    def translate(self, routes: list[Route]) -> Translation:
        translated: dict[Route, _Translated] = {}
        quarantined: dict[str, str] = {}
        for route in routes:
            cached = self._entries.get(route)
            if cached is None:
                try:
                    cached = _translate_route(route, self._settings)
                except (ParseError, ValueError) as exc:
                    # A translator gap must cost one route, not the whole config.
                    quarantined[route.id] = f"{route.origin}: {exc}"
                    log.error("route_quarantined", route=route.id, origin=str(route.origin), error=str(exc))
                    continue
                self.translated_routes += 1
                for warning in unenforced(
                    route, ext_authz=self._settings.ext_authz is not None, rate_limit=self._settings.rate_limit is not None
                ):
                    log.warning("route_field_not_enforced", route=route.id, origin=str(route.origin), detail=warning)
            translated[route] = cached
        self._entries = translated
        # Cluster-level fields (circuitBreaker, outlierDetection, healthCheck, timeouts.connect)
        # must agree between the routes sharing a cluster; a contradicting route is left out.
        policies, contradicting = cluster_policies(list(translated), {r: t.refs for r, t in translated.items()})
        for route, problem in contradicting.items():
            quarantined[route.id] = f"{route.origin}: {problem}"
            log.error("route_quarantined", route=route.id, origin=str(route.origin), error=problem)
        translated = {route: t for route, t in translated.items() if route not in contradicting}
        self.quarantined = quarantined
        ordered = sorted(translated, key=lambda route: translated[route].sort_key)

        users: dict[ClusterRef, list[str]] = {}
        for route in ordered:
            for ref in translated[route].refs:
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
            provenance=tuple(route.id for route in ordered),
            references=tuple(ref.name for ref in refs),
        )
        return Translation(
            listeners=(self._listener,),
            routes=(route_resource,),
            clusters=clusters,
            cluster_refs=refs,
            model=tuple(ordered),
            ratelimits=tuple(t.policy for t in translated.values() if t.policy is not None),
            secrets=self._secrets,
        )


def listener_resource(settings: GatewaySettings) -> Resource:
    """The HTTP listener for one node group; groups differ in where they listen, their
    limits and their TLS."""
    return Resource.from_message(
        ResourceType.LISTENER,
        LISTENER_NAME,
        http_listener(settings),
        references=(ROUTE_CONFIG_NAME,) + ((SECRET_NAME,) if settings.tls is not None else ()),
    )


def secret_resources(settings: GatewaySettings) -> tuple[Resource, ...]:
    """The listener's TLS secret over SDS (file names, no key bytes), if it terminates TLS."""
    if settings.tls is None:
        return ()
    return (Resource.from_message(ResourceType.SECRET, SECRET_NAME, parse(Secret, tls_secret(settings.tls))),)


def service_clusters(settings: GatewaySettings) -> tuple[Resource, ...]:
    """Clusters for Gatehouse's own services (static addresses, no EDS)."""
    clusters = []
    if settings.ext_authz is not None:
        clusters.append(ext_authz_cluster(settings.ext_authz))
    if settings.rate_limit is not None:
        clusters.append(ratelimit_cluster(settings.rate_limit))
    if settings.access_log is not None:
        clusters.append(access_log_cluster(settings.access_log))
    return tuple(
        Resource.from_message(ResourceType.CLUSTER, data["name"], parse(Cluster, data)) for data in clusters
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
