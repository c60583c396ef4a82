"""ReferenceGrants from the Kubernetes API, for the reference rule (``model/references.py``),
and the ``ResolvedRefs`` condition it puts on a Route.

Grants are watched in every namespace, even when Routes are watched in a few: a grant
lives with the Services it opens, which need not be in a namespace whose Routes are
watched. They are watched at ``gateway.networking.k8s.io/v1beta1``, the storage version of
Gateway API v1.6's standard CRD (``v1`` serves the same objects), and published to the
pipeline as a route set of their own (no routes, every grant), whose grants count for
the routes of every source.

Failure policy:

- The CRD is not installed (or no longer serves v1beta1): no grants, so no cross-namespace
  reference is served (fail closed); the status says ``installed: false`` and the API is
  looked for again every 5 s (``watch.ABSENT_RETRY``). The source still syncs.
- The API server is unreachable: the watch keeps the grants it last listed (``watch.py``),
  as it does for Routes.
- An object the schema refuses (only a CRD other than the standard one lets one be
  stored) grants nothing; it is logged and listed in the status with the field and why.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import structlog
from kubernetes import client
from pydantic import ValidationError

from control_plane.model.loading import validation_problems
from control_plane.model.reference_grants import GROUP, PLURAL, VERSION, grant_from_document
from control_plane.model.references import ReferenceGrant, Unresolved
from control_plane.model.route import Origin
from control_plane.sources.base import PublishRoutes, RouteSet
from control_plane.sources.kubernetes.routes import object_document
from control_plane.sources.kubernetes.status import Condition
from control_plane.sources.kubernetes.watch import Changes, Object, ResourceWatch

log = structlog.get_logger(component="source.kubernetes")

SOURCE = "kubernetes-referencegrants"
"""The name of the route set the grants are published in."""
PATH = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
WATCH_NAME = "referencegrants"

RESOLVED = Condition("ResolvedRefs", "True", "ResolvedRefs", "every Service the route names is permitted")


def resolved_refs(unresolved: Unresolved | None) -> Condition:
    """The Route's ``ResolvedRefs`` condition, with Gateway API's reason for a missing grant."""
    if unresolved is None:
        return RESOLVED
    return Condition("ResolvedRefs", "False", "RefNotPermitted", unresolved.message)


def grant_from_object(obj: Object) -> ReferenceGrant:
    """A stored ReferenceGrant → the rule's grant; ValidationError/ValueError if refused."""
    meta = obj.get("metadata", {})
    key = f"{meta.get('namespace')}/{meta.get('name')}"
    origin = Origin("kubernetes", key, str(meta.get("resourceVersion", "")), created=str(meta.get("creationTimestamp", "")))
    return grant_from_document(object_document(obj), origin, cluster=True)


class KubernetesReferenceGrants:
    """Fed by the watch ``watch()`` makes; publishes every grant after each batch."""

    def __init__(self) -> None:
        self._grants: dict[str, ReferenceGrant] = {}
        self._publish: PublishRoutes | None = None
        self._watch: ResourceWatch | None = None
        self.invalid: dict[str, str] = {}

    def attach(self, publish: PublishRoutes) -> None:
        self._publish = publish

    def watch(
        self, api: client.ApiClient, loop: asyncio.AbstractEventLoop, wrap: Callable[[str, Callable[[Changes], None]], Callable[[Changes], None]]
    ) -> ResourceWatch:
        """The watch of every namespace's grants; ``wrap`` (the source's first-sync
        bookkeeping) is handed the watch's name and ``apply``."""
        self._watch = ResourceWatch(api, PATH, wrap(WATCH_NAME, self.apply), loop, name=WATCH_NAME, optional=True)
        return self._watch

    def apply(self, changes: Changes) -> None:
        seen_at = time.monotonic()
        for key, obj in changes.items():
            self._grants.pop(key, None)
            self.invalid.pop(key, None)
            if obj is None:
                continue
            try:
                self._grants[key] = grant_from_object(obj)
            except ValidationError as exc:
                self.invalid[key] = "; ".join(f"{p.field}: {p.reason}" for p in validation_problems(exc, key, None))
            except ValueError as exc:
                self.invalid[key] = str(exc)
            if key in self.invalid:
                log.warning("reference_grant_refused", grant=key, problem=self.invalid[key])
        if self._publish is not None:
            grants = tuple(self._grants[key] for key in sorted(self._grants))
            self._publish(RouteSet(SOURCE, "", (), seen_at, grants=grants))

    def status(self) -> dict[str, Any]:
        return {
            "installed": not (self._watch is not None and self._watch.absent),
            "grants": len(self._grants),
            "invalid": dict(self.invalid) or None,
        }
