"""Which namespaces a route source's files may claim, and the documents that claim others.

A Git repository is not one trust domain once several teams share it: the namespace in a
document's ``metadata`` is text its author chose. The operator binds each Git source (and,
optionally, each directory in it) to the namespaces it may claim (``sources.git[].namespaces``
and ``namespacesByPath``, docs/control-plane-config.md). A Route or ReferenceGrant whose
``metadata.namespace`` is outside its file's binding is refused, named by file, line and
field, and counts for nothing: it is not served, it cannot pose as that namespace to use
a cluster ReferenceGrant or a token-swap audience, and a grant cannot open that namespace.
The rest of the commit is unaffected, so one team's mistake never holds back another's.

A source with no list may claim only ``default`` (what a document gets when it names no
namespace): a single-owner repo that never writes a namespace keeps working, and nothing
is claimed that the operator did not write down.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from control_plane.errors import Problem
from control_plane.model.loading import Documents

UNBOUND_DEFAULT = frozenset({"default"})
"""What a Git source with no ``namespaces`` may claim."""


@dataclass(frozen=True)
class NamespaceBinding:
    """The namespaces files may claim: the source's own list, and narrower lists for files
    under some directories (the longest matching directory decides)."""

    setting: str
    """The config path of the source, for errors: ``sources.git[routes]``."""
    namespaces: frozenset[str] | None
    """The source's ``namespaces``; None: not set (only ``default``)."""
    by_path: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Directory (relative to the source's ``path``) → namespaces its files may claim."""

    @classmethod
    def of(cls, setting: str, namespaces: Sequence[str] | None, by_path: Mapping[str, Sequence[str]] | None = None) -> NamespaceBinding:
        return cls(
            setting,
            None if namespaces is None else frozenset(namespaces),
            {_directory(d): frozenset(n) for d, n in (by_path or {}).items()},
        )

    def for_file(self, location: str) -> tuple[frozenset[str], str]:
        """The namespaces the file at ``location`` (relative to the source's path) may
        claim, and which setting says so, as a refusal names it."""
        best = ""
        for directory in self.by_path:
            if (location.startswith(directory + "/") or location == directory) and len(directory) > len(best):
                best = directory
        if best:
            return self.by_path[best], f"{self.setting}.namespacesByPath[{best!r}]: {_listed(self.by_path[best])}"
        if self.namespaces is None:
            return UNBOUND_DEFAULT, f"{self.setting}.namespaces is not set, so only [default]"
        return self.namespaces, f"{self.setting}.namespaces: {_listed(self.namespaces)}"


def _directory(path: str) -> str:
    return path.strip("/")


def _listed(namespaces: frozenset[str]) -> str:
    return "[" + ", ".join(sorted(namespaces)) + "]" if namespaces else "[] (none)"


def bind_documents(found: Documents, binding: NamespaceBinding, location: str) -> tuple[Documents, list[Problem]]:
    """``found`` (one file's documents) without those claiming a namespace the file may not,
    and a refusal for each. ``location`` is the file's path relative to the source's path."""
    allowed, setting = binding.for_file(location)
    refused: list[Problem] = []
    routes = []
    for route in found.routes:
        if route.namespace in allowed:
            routes.append(route)
        else:
            refused.append(Problem(
                str(route.origin), "metadata.namespace",
                f"Route {route.id}: namespace {route.namespace!r} is not one this file may claim "
                f"({setting}); the route is not served",
            ))
    grants = []
    for grant in found.grants:
        if grant.namespace in allowed:
            grants.append(grant)
        else:
            refused.append(Problem(
                str(grant.origin), "metadata.namespace",
                f"ReferenceGrant {grant.id}: namespace {grant.namespace!r} is not one this file may claim "
                f"({setting}); it opens nothing",
            ))
    if not refused:
        return found, []
    return replace(found, routes=routes, grants=grants), refused
