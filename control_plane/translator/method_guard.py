"""``match.otherMethods: reject``: a request on the route's path with a method no route there
takes gets 405 with ``Allow``, instead of falling through to a broader route.

Without it, ``POST /orders/42`` on a route that takes ``GET`` only is matched by the next
route down (often a broader public one: ``/orders/**``), which nobody meant. The guard is
a route of its own, a direct 405 on the same hosts, path and header conditions with no
method condition: most specific first puts it right after every route of that path that
names methods, and before any broader route. ``Allow`` lists every method the routes of
that path take. The gateway's local-reply mapper gives it the JSON error body
(``method_not_allowed``, local_replies).
"""

from __future__ import annotations

from collections.abc import Iterable

from control_plane.model.route import Route
from control_plane.model.match import METHODS
from control_plane.model.schema import RouteSpec

Signature = tuple[object, ...]


def signature(route: Route) -> Signature:
    """What a guard shares with the routes it stands behind: hosts, path, header conditions."""
    match = route.spec.match
    headers = tuple(sorted(h.model_dump_json() for h in match.headers))
    return (tuple(sorted(route.spec.hosts)), match.path, match.path_prefix, match.path_regex, headers)


def guards(routes: Iterable[Route], cache: dict[tuple[Signature, tuple[str, ...]], Route]) -> list[Route]:
    """One guard per path whose routes ask for it, from ``cache`` when unchanged."""
    allowed: dict[Signature, set[str]] = {}
    wanted: dict[Signature, Route] = {}
    for route in routes:
        key = signature(route)
        allowed.setdefault(key, set()).update(route.spec.match.methods)
        if route.spec.match.other_methods == "reject" and route.spec.disabled is None:
            wanted.setdefault(key, route)
    found = []
    for key, route in wanted.items():
        methods = tuple(m for m in METHODS if m in allowed[key])
        guard = cache.get((key, methods))
        if guard is None:
            guard = cache[(key, methods)] = _guard(route, methods)
        found.append(guard)
    return found


def _guard(route: Route, methods: tuple[str, ...]) -> Route:
    match = route.spec.match
    data: dict[str, object] = {
        "hosts": list(route.spec.hosts),
        "match": {
            **({"path": match.path} if match.path is not None else {}),
            **({"pathPrefix": match.path_prefix} if match.path_prefix is not None else {}),
            **({"pathRegex": match.path_regex} if match.path_regex is not None else {}),
            "headers": [h.model_dump(by_alias=True, exclude_defaults=True) for h in match.headers],
        },
        "auth": {"required": False},
        "disabled": {"status": 405},
        "headers": {"response": {"set": {"allow": ", ".join(methods)}}},
    }
    return Route(route.namespace, route.name, RouteSpec.model_validate(data), route.origin)
