"""Most specific route first, deterministically.

exact path > template with more literal segments > regex > longer prefix > shorter
prefix; then routes with more conditions (methods, headers) before fewer; ties by
(namespace, name). A trailing ``/**`` without variables is a segment prefix and sorts
with the prefixes, so ``/orders/{id}`` always wins over ``/orders/**``.
"""

from __future__ import annotations

from control_plane.model.paths import PathKind
from control_plane.model.route import Route

_EXACT, _TEMPLATE, _REGEX, _PREFIX = range(4)

SortKey = tuple[int, int, int, int, int, str, str]


def specificity_key(route: Route) -> SortKey:
    match = route.spec.match
    conditions = -(len(match.headers) + (1 if match.methods else 0))
    pattern = route.path
    if pattern is not None:
        if pattern.kind is PathKind.EXACT:
            rank = (_EXACT, 0, 0, -len(pattern.text))
        elif pattern.kind is PathKind.TEMPLATE:
            rank = (_TEMPLATE, -pattern.literal_segments, int(pattern.glob), -pattern.segments)
        else:
            rank = (_PREFIX, -len(pattern.literal_prefix) - 1, 0, 0)
    elif match.path_regex is not None:
        rank = (_REGEX, 0, 0, -len(match.path_regex))
    else:
        assert match.path_prefix is not None
        rank = (_PREFIX, -len(match.path_prefix), 0, 0)
    return (*rank, conditions, route.namespace, route.name)


def most_specific_first(routes: list[Route]) -> list[Route]:
    return sorted(routes, key=specificity_key)
