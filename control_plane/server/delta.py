"""Incremental (delta) ADS: only changed resources travel, removals are explicit, and
Envoy's ``initial_resource_versions`` spare a full resend after a reconnect."""

from __future__ import annotations

from envoy.service.discovery.v3 import discovery_pb2

from control_plane.cache.resource import Resource
from control_plane.cache.types import ResourceType
from control_plane.server.stream import AdsStream, nack_reason
from control_plane.server.subscriptions import WILDCARD, Plan


class DeltaStream(AdsStream):
    protocol = "delta"

    def _handle(self, kind: ResourceType, request: discovery_pb2.DeltaDiscoveryRequest) -> None:
        state = self._state[kind]
        if request.response_nonce:
            self._settle(kind, request.response_nonce, nack_reason(request))
        subscribe = set(request.resource_names_subscribe)
        unsubscribe = set(request.resource_names_unsubscribe)
        if not state.requested:
            state.requested = True
            # A first request without names is the legacy wildcard subscription.
            state.wildcard = WILDCARD in subscribe or (kind.wildcard and not subscribe)
            self._seed(kind, dict(request.initial_resource_versions))
        else:
            # Envoy asks again for what it may have "forgotten" (the protocol says to answer).
            state.resend |= subscribe - {WILDCARD}
        if WILDCARD in subscribe:
            state.wildcard = True
        if WILDCARD in unsubscribe:
            state.wildcard = False
        state.names |= subscribe - {WILDCARD}
        state.names -= unsubscribe
        for name in unsubscribe:
            state.acked.pop(name, None)
        if unsubscribe:
            state.acked_version = ""

    def _seed(self, kind: ResourceType, versions: dict[str, str]) -> None:
        """Take what a reconnecting Envoy already has as ACKed, by content version."""
        if not versions or self._proxy is None:
            return
        snapshot = self._cache.current(self._proxy.group)
        current = snapshot.of(kind) if snapshot is not None else {}
        acked = {}
        for name, version in versions.items():
            resource = current.get(name)
            if resource is None or resource.version != version:
                # Content unknown: a route config at this version may use any cluster.
                references = (WILDCARD,) if kind is ResourceType.ROUTE else ()
                resource = Resource(kind, name, b"", version, references=references)
            acked[name] = resource
        self._state[kind].acked = acked

    def _response(self, plan: Plan, nonce: str) -> discovery_pb2.DeltaDiscoveryResponse:
        return discovery_pb2.DeltaDiscoveryResponse(
            system_version_info=plan.version,
            resources=[
                discovery_pb2.Resource(name=r.name, version=r.version, resource=r.to_any()) for r in plan.changed
            ],
            type_url=plan.kind.url,
            removed_resources=plan.removed,
            nonce=nonce,
        )
