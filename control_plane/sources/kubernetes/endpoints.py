"""Services + EndpointSlices → the ready endpoints of each backend cluster.

A backend names a Service port; the Service says that port's name, and EndpointSlices
of that Service carry the target port under the same name. Several slices per Service
are merged. An endpoint is used only while ready and serving and not terminating (an
unset condition counts as the safe default: ready, serving, not terminating). The zone
becomes Envoy's locality.

Only slices and addresses ``endpoint_trust`` accepts are used; each one refused is logged
once (per slice version) and counted in ``gatehouse_endpoints_refused_total``.
"""

from __future__ import annotations

from typing import Any

import structlog

from control_plane import metrics
from control_plane.sources.kubernetes.endpoint_trust import EndpointSliceTrust, address_refusal, slice_refusal
from control_plane.sources.kubernetes.watch import Changes, Object
from control_plane.translator.endpoints import Endpoint
from control_plane.translator.names import ClusterRef

log = structlog.get_logger(component="source.kubernetes.endpoints")

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

    def __init__(self, trust: EndpointSliceTrust | None = None) -> None:
        self._trust = trust or EndpointSliceTrust()
        self._reported: dict[str, set[str]] = {}
        """Per slice key, the refusals already logged for its current version."""
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
            self._reported.pop(key, None)
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
        for key, slice_ in self._slices.get((ref.namespace, ref.service), {}).items():
            address_type = slice_.get("addressType")
            if address_type not in ("IPv4", "IPv6"):
                continue
            refused = slice_refusal(slice_, service, self._trust)
            if refused is not None:
                self._refuse(key, "slice", refused)
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
                    refused = address_refusal(str(address), str(address_type), self._trust)
                    if refused is not None:
                        self._refuse(key, "address", refused)
                        continue
                    found.add(Endpoint(address, int(target), endpoint.get("zone") or ""))
        return tuple(sorted(found))

    def _refuse(self, key: str, what: str, reason: str) -> None:
        """Log and count a refusal once per slice version: a Service's endpoints are
        resolved again for every port and after every change of the Service."""
        seen = self._reported.setdefault(key, set())
        if reason in seen:
            return
        seen.add(reason)
        metrics.ENDPOINTS_REFUSED.labels(what).inc()
        log.warning("endpoint_slice_refused", slice=key, refused=what, reason=reason)
