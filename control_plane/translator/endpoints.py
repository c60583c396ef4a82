"""Endpoint tables → ClusterLoadAssignments. This is the fast path: no route is touched.

Assignments are built as messages directly rather than through ``ParseDict``: this runs
on every endpoint change, the structure is fixed, and there is no user text to reject.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from control_plane.translator.messages import ClusterLoadAssignment
from control_plane.translator.names import ClusterRef


@dataclass(frozen=True, order=True, slots=True)
class Endpoint:
    """One ready address of a backend; ``zone`` becomes Envoy's locality."""

    address: str
    port: int
    zone: str = ""
    weight: int = 1


class EndpointTable(Protocol):
    """What every endpoint source produces: the ready endpoints of each cluster."""

    def endpoints_for(self, ref: ClusterRef) -> tuple[Endpoint, ...]: ...

    def knows(self, ref: ClusterRef) -> bool:
        """Whether the table speaks for this service at all, endpoints or none."""
        ...


def load_assignment(ref: ClusterRef, endpoints: Iterable[Endpoint]) -> ClusterLoadAssignment:
    assignment = ClusterLoadAssignment(cluster_name=ref.name)
    by_zone: dict[str, list[Endpoint]] = defaultdict(list)
    for endpoint in endpoints:
        by_zone[endpoint.zone].append(endpoint)
    for zone in sorted(by_zone):
        locality = assignment.endpoints.add()
        if zone:
            locality.locality.zone = zone
        for endpoint in sorted(by_zone[zone]):
            lb = locality.lb_endpoints.add()
            socket = lb.endpoint.address.socket_address
            socket.address = endpoint.address
            socket.port_value = endpoint.port
            if endpoint.weight != 1:
                lb.load_balancing_weight.value = endpoint.weight
    return assignment
