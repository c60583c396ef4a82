"""Route entries → virtual hosts and the one RouteConfiguration.

Envoy picks a single virtual host per request, the most specific domain match; what each
virtual host carries, and in which order, is ``route_configuration``'s docstring.
"""

from __future__ import annotations

from collections import defaultdict

from control_plane.model.route import Route
from control_plane.translator import wire
from control_plane.translator.messages import RouteConfiguration
from control_plane.translator.names import ROUTE_CONFIG_NAME

ANY_HOST = "*"


def vhost_name(domain: str) -> str:
    """``host_`` and the domain with '.' and '*' as '_': Envoy's ``envoy.virtual_host`` and
    ``envoy.route`` stat tags only parse a name made of word characters and '-'. DNS names
    have no '_' and no empty label, so this is one-to-one (``*.a.com`` → ``host___a_com``)."""
    return "host_" + domain.replace(".", "_").replace("*", "_")


def _covers(pattern: str, domain: str) -> bool:
    """Whether a route on host ``pattern`` must also be served on virtual host ``domain``."""
    if pattern == domain:
        return True
    return pattern.startswith("*.") and domain.endswith(pattern[1:])


def _hosts(route: Route) -> list[str]:
    hosts = list(route.spec.hosts)
    return [] if not hosts or ANY_HOST in hosts else hosts


def _host_rank(names: list[str], domain: str) -> tuple[int, int]:
    """How closely a route's hosts name ``domain``: exact, then longer wildcards, then none."""
    if not names:
        return (2, 0)
    if domain in names:
        return (0, 0)
    return (1, min(-len(name) for name in names if _covers(name, domain)))


def route_configuration(ordered: list[Route], encoded: dict[Route, bytes]) -> bytes:
    """One virtual host per named host, plus "*", serialized.

    Envoy picks a single virtual host, the most specific domain match, so each virtual
    host also carries every route that would match it through a wider name: host-less
    routes everywhere, and ``*.example.com`` routes on ``api.example.com``. Within a
    virtual host, routes naming the host exactly come first, then wildcards (longer
    first), then host-less routes, each in path order (as Gateway API ranks hostnames
    before paths). ``encoded`` holds each route's entries as VirtualHost.routes records.
    """
    hosts = {route: _hosts(route) for route in ordered}
    domains = sorted({host for names in hosts.values() for host in names})
    position = {route: index for index, route in enumerate(ordered)}
    named: dict[str, list[Route]] = defaultdict(list)
    anywhere: list[Route] = []
    for route in ordered:
        names = hosts[route]
        if not names:
            anywhere.append(route)
            continue
        covered = set(names)
        for name in names:
            if name.startswith("*."):
                covered.update(d for d in domains if _covers(name, d))
        for domain in covered:
            named[domain].append(route)

    def members(domain: str) -> list[Route]:
        ranked = sorted(named[domain], key=lambda r: (_host_rank(hosts[r], domain), position[r]))
        return ranked + anywhere

    head = RouteConfiguration(name=ROUTE_CONFIG_NAME)
    head.validate_clusters.value = False
    vhosts = [
        wire.virtual_host(
            vhost_name(domain),
            [domain],
            (encoded[r] for r in members(domain)),
        )
        for domain in domains
    ]
    vhosts.append(wire.virtual_host("any", [ANY_HOST], (encoded[r] for r in anywhere)))
    return wire.route_configuration(head, vhosts)
