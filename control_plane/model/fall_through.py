"""Requests an authenticated route does not take that a public route takes instead.

A route with ``methods: [GET]`` on ``/orders/{id}`` does not take ``POST /orders/42``,
and a path or template route does not take ``/orders/42/`` (a trailing slash): Envoy
gives such a request to the next route that matches, often a broader one. When that one
is public, the request reaches an upstream with no token checked, and nobody was told.
For each route that asks for a token this finds, by routing a sample of such requests
(its path with another method; with a trailing slash) through the whole table as Envoy
would (hosts, then most specific first), the public route that would take it, so the
route's status and ``gatehouse validate`` can warn. ``match.otherMethods: reject``
answers 405 instead (``translator/method_guard.py``), which closes the method case.

Spellings of the route's path that Envoy does not match but an upstream may read as it
(``/Admin/x``, ``/admin;p/x``: ``path_variants``) are sampled the same way. When one
reaches a public route the gateway refuses every such variant of the route (400,
``translator/variant_guard.py``, from ``variant_takers``), so there is nothing to warn
about; only a route whose variants cannot be refused that way (a template too complex
for one Envoy regex) is warned about, as for a method.

Routes are indexed by their path's first segment (exact paths and templates) and kept in
one short list otherwise (prefixes, ``/**``, regexes), so each sample looks at the routes
that could match it, not at every route.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import re2

from control_plane.model.ordering import specificity_key
from control_plane.model.paths import PathKind
from control_plane.model.path_variants import guardable, sample_paths
from control_plane.model.route import Route

_OTHER_METHODS = ("POST", "PUT", "DELETE", "PATCH", "GET")


@dataclass(frozen=True, slots=True)
class Sample:
    path: str
    method: str
    why: str


def _first_segment(path: str) -> str:
    return path.lstrip("/").split("/", 1)[0]


def _template_regex(text: str) -> re.Pattern[str]:
    """A template or an exact path as a regex over the request path: ``{x}`` is one segment."""
    parts = []
    for segment in text.strip("/").split("/"):
        if segment == "**":
            parts.append(".*")
        elif segment.startswith("{") and segment.endswith("}"):
            parts.append("[^/]+")
        else:
            parts.append(re.escape(segment))
    return re.compile("/" + "/".join(parts))


class _Matcher:
    """One route's path condition, as a predicate on a request path."""

    def __init__(self, route: Route) -> None:
        self.route = route
        match = route.spec.match
        pattern = route.path
        self.regex: Any = None
        """A compiled pattern with ``fullmatch`` (Python's for templates, RE2's for regexes)."""
        self.prefix: str | None = None
        self.segment_base: str | None = None
        if pattern is not None and pattern.kind is PathKind.SEGMENT_PREFIX:
            self.segment_base = pattern.literal_prefix
        elif pattern is not None:
            self.regex = _template_regex(pattern.text)
            if pattern.glob:  # /a/{x}/** also takes /a/{x}
                self.regex = re.compile(f"(?:{self.regex.pattern})|(?:{_template_regex(pattern.text[: -len('/**')]).pattern})")
        elif match.path_regex is not None:
            self.regex = re2.compile(match.path_regex)  # RE2, as Envoy reads it (the schema checked it)
        else:
            self.prefix = match.path_prefix

    def takes(self, path: str) -> bool:
        if self.prefix is not None:
            return path.startswith(self.prefix)
        if self.segment_base is not None:
            base = self.segment_base
            return not base or path == base or path.startswith(base + "/")
        assert self.regex is not None
        return self.regex.fullmatch(path) is not None


def _samples(route: Route) -> list[Sample]:
    """Requests on the route's own path that it does not take."""
    match = route.spec.match
    pattern = route.path
    if pattern is None:
        path = match.path_prefix  # a regex route has no one path to sample
    elif pattern.kind is PathKind.SEGMENT_PREFIX:
        path = pattern.literal_prefix or "/"
    else:
        path = "/" + "/".join("x" if s.startswith("{") else s for s in pattern.text.strip("/").split("/") if s != "**")
    if path is None:
        return []
    found = []
    if match.methods and match.other_methods != "reject":
        method = next(m for m in _OTHER_METHODS if m not in match.methods)
        found.append(Sample(path, method, f"{method} {path} (a method the route does not take)"))
    if pattern is not None and pattern.kind in (PathKind.EXACT, PathKind.TEMPLATE) and not pattern.glob and path != "/":
        method = match.methods[0] if match.methods else "GET"
        found.append(Sample(path + "/", method, f"{method} {path}/ (a trailing slash)"))
    return found


def _variant_samples(route: Route) -> list[Sample]:
    """Requests on a spelling of the route's path that Envoy does not match (path_variants)."""
    method = route.spec.match.methods[0] if route.spec.match.methods else "GET"
    own = _Matcher(route)  # a raw prefix ``/ad`` takes ``/ad;p`` itself: not a variant
    return [Sample(path, method, f"{method} {path} ({why})") for path, why in sample_paths(route) if not own.takes(path)]


def _hosts(route: Route) -> frozenset[str]:
    hosts = frozenset(route.spec.hosts)
    return frozenset() if "*" in hosts else hosts


def _host_rank(route: Route, host: str | None) -> tuple[int, int] | None:
    """How ``route`` ranks on a request for ``host`` (None: any host), or None if it is not there."""
    hosts = _hosts(route)
    if not hosts:
        return (2, 0)
    if host is None:
        return None
    if host in hosts:
        return (0, 0)
    covering = [h for h in hosts if h.startswith("*.") and host.endswith(h[1:])]
    return (1, -max(len(h) for h in covering)) if covering else None


class FallThroughs:
    """Index the served routes once; ``of(route)`` names the public routes taking requests
    ``route`` does not."""

    def __init__(self, routes: Sequence[Route]) -> None:
        self._by_segment: dict[str, list[_Matcher]] = defaultdict(list)
        self._general: list[_Matcher] = []
        for route in routes:
            matcher = _Matcher(route)
            pattern = route.path
            if pattern is not None and pattern.kind in (PathKind.EXACT, PathKind.TEMPLATE):
                first = _first_segment(pattern.text)
                if first and not first.startswith("{") and first != "**":
                    self._by_segment[first].append(matcher)
                    continue
            self._general.append(matcher)

    def _first(self, sample: Sample, host: str | None, excluded: Route) -> Route | None:
        candidates = []
        for matcher in (*self._by_segment.get(_first_segment(sample.path), ()), *self._general):
            route = matcher.route
            if route is excluded or not matcher.takes(sample.path):
                continue
            methods = route.spec.match.methods
            if methods and sample.method not in methods and route.spec.match.other_methods != "reject":
                continue
            rank = _host_rank(route, host)
            if rank is not None:
                candidates.append((rank, specificity_key(route), route))
        return min(candidates, key=lambda c: (c[0], c[1]))[2] if candidates else None

    def _public_takers(self, route: Route, samples: list[Sample]) -> list[tuple[Sample, Route]]:
        """Each sample that the first route to take it, other than ``route``, serves publicly."""
        hosts = sorted(_hosts(route))
        host = next((h for h in hosts if not h.startswith("*.")), None) if hosts else None
        found = []
        for sample in samples:
            taker = self._first(sample, host, route)
            if taker is not None and not taker.spec.auth.required and taker.spec.disabled is None:
                found.append((sample, taker))
        return found

    def variant_takers(self, route: Route) -> list[tuple[Sample, Route]]:
        """The public routes that variants of ``route``'s path (letter case, ``;``
        parameters) reach, for a route that asks for a token; empty: nothing to refuse."""
        if not route.spec.auth.required or route.spec.disabled is not None:
            return []
        return self._public_takers(route, _variant_samples(route))

    def of(self, route: Route) -> list[str]:
        """Warnings for ``route`` (a route that asks for a token): each request it does not
        take that a public route would take, naming both."""
        if not route.spec.auth.required or route.spec.disabled is not None:
            return []
        samples = _samples(route) + ([] if guardable(route) else _variant_samples(route))
        warnings = []
        for sample, taker in self._public_takers(route, samples):
            warnings.append(
                f"{sample.why} falls through to the public route {taker.id}, which serves it with no token checked"
                + ("; set match.otherMethods: reject to answer 405" if "method" in sample.why else "")
            )
        return warnings
