"""Refuse (400) the spellings of a protected route's path that would reach a public route.

``/Admin/users`` and ``/admin;x/users`` are not taken by a route on ``/admin/**``
(Envoy matches case-sensitively and byte for byte), so they fall to the next route, often
a public ``/``; a case-insensitive upstream or one that strips ``;`` parameters (Tomcat,
Spring) then serves ``/admin/users`` with no token checked (``model/path_variants.py``).

For each route that asks for a token and whose variants reach a public route
(``FallThroughs.variant_takers``), entries placed right after the route's own, on the same
hosts, methods and header conditions, answer those variants 400 ``non_canonical_path``:

- the route's own path match with ``case_sensitive: false`` (exact path, segment prefix,
  raw prefix): every letter-case variant;
- a ``prefix`` ``/a;`` for each literal segment ``/a``, ``/a/b``, ... before the first
  variable, case-insensitive: ``;`` parameters on a segment the route names;
- for a template, one case-insensitive regex with ``;`` parameters allowed after each
  literal segment (Envoy's ``uri_template`` matcher has no case-insensitive mode).

Because they follow the route's own entries, the canonical path never reaches them: only
spellings the route did not take. Only routes whose variants would reach a public route
get them, so a table without that case is unchanged (and pays no extra entries).
"""

from __future__ import annotations

from collections.abc import Sequence

from control_plane.model.fall_through import FallThroughs
from control_plane.model.path_variants import PARAMETER, literal_prefixes, template_regex
from control_plane.model.paths import PathKind
from control_plane.model.route import Route
from control_plane.model.schema import RouteSpec
from control_plane.translator import wire
from control_plane.translator.local_replies import REQUEST_ID
from control_plane.translator.messages import RouteEntry
from control_plane.translator.route_entries import route_entries
from control_plane.translator.settings import GatewaySettings

STATUS = 400
CODE = "non_canonical_path"
MESSAGE = (
    "The path differs from a protected route's path only by letter case or ';' path parameters; "
    "send the path exactly as the route names it."
)


def _guard_route(route: Route) -> Route:
    """A public direct-response twin of ``route`` (its hosts, methods and header
    conditions), translated like any route so every feature's per-route config applies."""
    match = route.spec.match
    data: dict[str, object] = {
        "hosts": list(route.spec.hosts),
        "match": {
            **({"path": match.path} if match.path is not None else {}),
            **({"pathPrefix": match.path_prefix} if match.path_prefix is not None else {}),
            "methods": list(match.methods),
            "headers": [h.model_dump(by_alias=True, exclude_defaults=True) for h in match.headers],
        },
        "auth": {"required": False},
        "disabled": {"status": STATUS},
    }
    return Route(route.namespace, route.name, RouteSpec.model_validate(data), route.origin)


def _path_matches(route: Route) -> list[dict[str, object]]:
    """The RouteMatch path fields of the route's variants (see the module docstring)."""
    pattern = route.path
    matches: list[dict[str, object]] = []
    if pattern is not None and pattern.kind is PathKind.TEMPLATE:
        regex = template_regex(route)
        return [{"safe_regex": {"regex": regex}}] if regex is not None else []
    if pattern is not None and pattern.kind is PathKind.EXACT:
        matches.append({"path": pattern.text})
    elif pattern is not None and pattern.literal_prefix:
        matches.append({"path_separated_prefix": pattern.literal_prefix})
    elif route.spec.match.path_prefix is not None and route.spec.match.path_prefix != "/":
        matches.append({"prefix": route.spec.match.path_prefix})
    matches.extend({"prefix": prefix + PARAMETER} for prefix in literal_prefixes(route))
    return matches


def guard_entries(route: Route, settings: GatewaySettings) -> list[RouteEntry]:
    """The 400 entries for ``route``'s variants, in match order (empty: none to build)."""
    matches = _path_matches(route)
    if not matches:
        return []
    base = route_entries(_guard_route(route), settings)[0]
    base.direct_response.ClearField("body")
    body = base.direct_response.body_format
    body.json_format.update({"error": {"code": CODE, "message": MESSAGE, "request_id": REQUEST_ID}})
    entries = []
    for path in matches:
        entry = RouteEntry()
        entry.CopyFrom(base)
        for field in ("path", "path_separated_prefix", "prefix", "path_match_policy", "safe_regex"):
            entry.match.ClearField(field)
        if "safe_regex" in path:
            entry.match.safe_regex.regex = path["safe_regex"]["regex"]  # type: ignore[index]
        else:
            ((field, value),) = path.items()
            setattr(entry.match, field, value)
            entry.match.case_sensitive.value = False
        entries.append(entry)
    return entries


def variant_guards(routes: Sequence[Route], served: Sequence[Route], settings: GatewaySettings) -> dict[Route, bytes]:
    """For each served route whose path variants reach a public route (``routes``: the
    whole table, the method guards included), its guard entries as VirtualHost.routes
    records, to follow its own entries."""
    if all(r.spec.auth.required for r in served) or not any(r.spec.auth.required for r in served):
        return {}  # nothing public to fall to, or nothing to protect
    index = FallThroughs(routes)
    found = {}
    for route in served:
        if not index.variant_takers(route):
            continue
        entries = guard_entries(route, settings)
        if entries:
            found[route] = b"".join(wire.as_route_field(e.SerializeToString(deterministic=True)) for e in entries)
    return found
