"""State-of-the-world ADS: every response for CDS/LDS carries the full set; EDS/RDS carry
the named resources that changed (Envoy keeps the ones a response leaves out)."""

from __future__ import annotations

from envoy.service.discovery.v3 import discovery_pb2

from control_plane.cache.types import ResourceType
from control_plane.server.stream import AdsStream, nack_reason
from control_plane.server.subscriptions import WILDCARD, Plan


class SotwStream(AdsStream):
    protocol = "sotw"

    def _handle(self, kind: ResourceType, request: discovery_pb2.DiscoveryRequest) -> None:
        state = self._state[kind]
        if request.response_nonce:
            self._settle(kind, request.response_nonce, nack_reason(request))
        names = set(request.resource_names)
        state.requested = True
        if kind.wildcard:
            state.wildcard = not names or WILDCARD in names
            state.names = names - {WILDCARD}
        else:
            dropped = state.names - names
            state.names = names
            for name in dropped:
                state.acked.pop(name, None)
            if dropped:
                state.acked_version = ""

    def _response(self, plan: Plan, nonce: str) -> discovery_pb2.DiscoveryResponse:
        resources = plan.target.values() if plan.kind.wildcard else plan.changed
        return discovery_pb2.DiscoveryResponse(
            version_info=plan.version,
            resources=[r.to_any() for r in resources],
            type_url=plan.kind.url,
            nonce=nonce,
        )
