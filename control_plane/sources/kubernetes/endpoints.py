"""Services + EndpointSlices → the ready endpoints of each backend cluster.

A backend names a Service port; the Service says that port's name, and EndpointSlices
of that Service carry the target port under the same name. Several slices per Service
are merged. An endpoint is used only while ready and serving and not terminating (an
unset condition counts as the safe default: ready, serving, not terminating). The zone
becomes Envoy's locality.
"""

from __future__ import annotations

from typing import Any

from control_plane.sources.kubernetes.watch import Changes, Object
from control_plane.translator.endpoints import Endpoint
from control_plane.translator.names import ClusterRef

SERVICE_LABEL = "kubernetes.io/service-name"


def _usable(endpoint: dict[str, Any]) -> bool:
    conditions = endpoint.get("conditions") or {}
    return (
        conditions.get("ready") is not False
        and conditions.get("serving") is not False
        and conditions.get("terminating") is not True
    )


class KubernetesEndpoints:
    """An EndpointTable kept current by Service and EndpointSlice watches."""

    def __init__(self) -> None:
        self._services: dict[str, Object] = {}
        self._slices: dict[tuple[str, str], dict[str, Object]] = {}
        self._slice_owner: dict[str, tuple[str, str]] = {}
        self._cache: dict[ClusterRef, tuple[Endpoint, ...]] = {}

    def knows(self, ref: ClusterRef) -> bool:
        """Whether the cluster has the Service (then it answers for it, endpoints or none)."""
        return f"{ref.namespace}/{ref.service}" in self._services

    def apply_services(self, changes: Changes) -> None:
        for key, obj in changes.items():
            if obj is None:
                self._services.pop(key, None)
            else:
                self._services[key] = obj
            self._forget(tuple(key.split("/", 1)))  # type: ignore[arg-type]

    def apply_slices(self, changes: Changes) -> None:
        for key, obj in changes.items():
            owner = self._slice_owner.pop(key, None)
            if owner is not None:
                self._slices.get(owner, {}).pop(key, None)
                self._forget(owner)
            if obj is None:
                continue
            namespace = obj["metadata"].get("namespace", "default")
            service = (obj["metadata"].get("labels") or {}).get(SERVICE_LABEL)
            if not service:
                continue
            owner = (namespace, service)
            self._slice_owner[key] = owner
            self._slices.setdefault(owner, {})[key] = obj
            self._forget(owner)

    def _forget(self, owner: tuple[str, str]) -> None:
        namespace, service = owner
        for ref in [r for r in self._cache if r.namespace == namespace and r.service == service]:
            del self._cache[ref]

    def endpoints_for(self, ref: ClusterRef) -> tuple[Endpoint, ...]:
        cached = self._cache.get(ref)
        if cached is None:
            cached = self._cache[ref] = self._resolve(ref)
        return cached

    def _resolve(self, ref: ClusterRef) -> tuple[Endpoint, ...]:
        service = self._services.get(f"{ref.namespace}/{ref.service}")
        if service is None:
            return ()
        ports = (service.get("spec") or {}).get("ports") or []
        port = next((p for p in ports if p.get("port") == ref.port and p.get("protocol", "TCP") == "TCP"), None)
        if port is None:
            return ()
        port_name = port.get("name") or ""
        found: set[Endpoint] = set()
        for slice_ in self._slices.get((ref.namespace, ref.service), {}).values():
            if slice_.get("addressType") not in ("IPv4", "IPv6"):
                continue
            target = next(
                (
                    p.get("port")
                    for p in slice_.get("ports") or []
                    if (p.get("name") or "") == port_name and p.get("protocol", "TCP") == "TCP"
                ),
                None,
            )
            if target is None:
                continue
            for endpoint in slice_.get("endpoints") or []:
                if not _usable(endpoint):
                    continue
                for address in endpoint.get("addresses") or []:
                    found.add(Endpoint(address, int(target), endpoint.get("zone") or ""))
        return tuple(sorted(found))
