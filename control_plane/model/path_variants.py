"""Spellings of a route's path that Envoy does not match but an upstream may read as it.

Envoy matches paths case-sensitively and byte for byte after its own normalization
(``normalize_path``, ``merge_slashes``, ``path_with_escaped_slashes_action`` on the
listener: ``/%61dmin``, ``//admin``, ``/./admin``, ``/x/../admin`` and ``/admin%2Fx`` are
already the canonical path, or a redirect to it, before any route is chosen). Two kinds
of spelling survive it and are read as the route's path by common upstreams:

- **letter case**: ``/Admin/users`` is ``/admin/users`` to a case-insensitive server
  (IIS, ASP.NET, a case-insensitive filesystem);
- **path parameters**: ``/admin;x/users`` is ``/admin/users`` to a server that strips
  ``;`` parameters from each segment (Tomcat, Jetty, Spring).

Such a request is not taken by the route that names the path, so it falls through to the
next route that matches, often a broader public one. This module says, for a route, which
paths are such variants (as literal prefixes, and as an RE2 regex for templates, for the translator's guard,
``translator/variant_guard.py``) and gives sample variants for the fall-through index
(``fall_through.py``). Pure: no Envoy types.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from control_plane.model.paths import PathKind, PathPattern, check_re2
from control_plane.model.route import Route

PARAMETER = ";"
"""Starts a segment's path parameters (RFC 3986 3.3; servlet containers strip them)."""
_PARAMETERS_REGEX = "(?:;[^/]*)?"
"""Optional ``;...`` parameters after a literal segment, up to the next ``/``."""


@dataclass(frozen=True, slots=True)
class Segment:
    """One segment of a route's path: a literal (``admin``), or a variable or glob (``None``)."""

    literal: str | None
    glob: bool = False


def segments(route: Route) -> list[Segment] | None:
    """The route's path as segments, or None for a regex route (no one path to vary)."""
    pattern = route.path
    if pattern is not None:
        return _pattern_segments(pattern)
    prefix = route.spec.match.path_prefix
    if prefix is None:
        return None
    # A raw prefix: its segments are literals; what follows it is anything.
    return [Segment(part) for part in prefix.strip("/").split("/") if part] + [Segment(None, glob=True)]


def _pattern_segments(pattern: PathPattern) -> list[Segment]:
    if pattern.text == "/":
        return []
    found = []
    for part in pattern.text[1:].split("/"):
        if part == "**":
            found.append(Segment(None, glob=True))
        elif part.startswith("{"):
            found.append(Segment(None))
        else:
            found.append(Segment(part))
    return found


def literal_prefixes(route: Route) -> list[str]:
    """``/a``, ``/a/b``, ... for each literal segment before the route's first variable or
    glob: a request starting with one of them and then ``;`` carries parameters on a
    segment the route names (``/a;x/b``), which the route's own match does not take."""
    found = []
    path = ""
    for segment in segments(route) or ():
        if segment.literal is None:
            break
        path += "/" + segment.literal
        found.append(path)
    return found


def has_letters(route: Route) -> bool:
    """Whether some literal segment has a letter, so that letter case can vary."""
    return any(s.literal is not None and re.search("[A-Za-z]", s.literal) for s in segments(route) or ())


def template_regex(route: Route) -> str | None:
    """For a template route, an RE2 regex (full match, case-insensitive) of its path with
    ``;`` parameters allowed after every literal segment: it takes every letter-case and
    path-parameter variant of the path (and the path itself, which the route takes first).
    None for any other route (their variants need no regex), or when Envoy would refuse
    the regex as too complex (``paths.ENVOY_MAX_PROGRAM_SIZE``)."""
    pattern = route.path
    if pattern is None or pattern.kind is not PathKind.TEMPLATE:
        return None
    regex = "(?i)"
    for segment in _pattern_segments(pattern):
        if segment.glob:
            regex += "(?:/.*)?"  # ``/a/{x}/**`` also takes ``/a/{x}``
        elif segment.literal is None:
            regex += "/[^/]+"
        else:
            regex += "/" + re.escape(segment.literal) + _PARAMETERS_REGEX
    try:
        check_re2(regex)
    except ValueError:
        return None
    return regex


def guardable(route: Route) -> bool:
    """Whether the gateway can refuse the route's variants (``translator/variant_guard``):
    not for a regex route, nor a template whose regex Envoy would find too complex."""
    if route.path is not None and route.path.kind is PathKind.TEMPLATE:
        return template_regex(route) is not None
    return segments(route) is not None


def sample_paths(route: Route) -> list[tuple[str, str]]:
    """Sample variants of the route's path, each with what varies (``letter case``, ``a
    ;parameter``), for the fall-through index, which routes them through the table as
    Envoy would. ``x`` stands for a variable. Empty for a regex route, or a path with no
    literal segment (nothing to vary)."""
    parts = [s for s in segments(route) or () if not s.glob]
    literals = [i for i, s in enumerate(parts) if s.literal]
    if not literals:
        return []

    def spell(change: str) -> str:
        out = []
        for index, segment in enumerate(parts):
            text = segment.literal if segment.literal is not None else "x"
            if segment.literal is not None and change == "swapped":
                text = text.swapcase()
            elif segment.literal is not None and change == "first" and index == lettered[0]:
                at = re.search("[A-Za-z]", text)
                assert at is not None
                text = text[: at.start()] + text[at.start()].swapcase() + text[at.end() :]
            elif change == "parameter" and index == literals[0]:
                text += PARAMETER + "p"
            out.append(text)
        return "/" + "/".join(out)

    lettered = [i for i in literals if re.search("[A-Za-z]", parts[i].literal or "")]
    changes = [("swapped", "letter case"), ("first", "letter case")] if lettered else []
    prefix = route.spec.match.path_prefix
    tail = "/" if prefix is not None and prefix.endswith("/") else ""  # a raw ``/a/`` takes ``/a/``, not ``/a``
    return [(spell(change) + tail, why) for change, why in [*changes, ("parameter", "a ;parameter")]]
