"""Which EndpointSlices, and which addresses in them, the gateway may send traffic to.

Traffic from the gateway arrives from the one peer every NetworkPolicy trusts, so an
address taken from a slice is a door into the cluster. Kubernetes lets anyone who may
write EndpointSlices (or Endpoints, which the mirroring controller copies into slices)
list any address for a Service (CVE-2021-25740): another tenant's pod, Redis, the control
plane. So a slice counts only when a manager the operator trusts wrote it, for the kind of
Service that manager serves:

- ``endpointslice-controller.k8s.io`` (trusted by default) writes slices from a Service's
  selector, and only for Services with one: it claims a selector-less Service's slice only
  in a forgery, and reconciles away a forgery under a Service it does manage;
- ``endpointslicemirroring-controller.k8s.io`` copies user-written Endpoints of a
  selector-less Service: trusting it trusts whoever may write Endpoints (opt-in);
- any other name the operator lists (their own tooling) is taken for selector-less
  Services only.

The label itself is not authenticated: whoever may write EndpointSlices can forge it.
The default roles grant nobody that since Kubernetes 1.22; ``addressRanges`` (the pod and
Service ranges) bounds where a forgery could point. Loopback, link-local, multicast and
unspecified addresses are never used (the API server refuses most of them; a loopback
address would reach the gateway pod's own sidecars).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
SLICE_CONTROLLER = "endpointslice-controller.k8s.io"
MIRRORING_CONTROLLER = "endpointslicemirroring-controller.k8s.io"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class EndpointSliceTrust:
    """The operator's choice (``sources.kubernetes.endpointSlices``)."""

    trusted_managers: tuple[str, ...] = (SLICE_CONTROLLER,)
    address_ranges: tuple[Network, ...] = ()
    """Empty: any address that is not loopback, link-local, multicast or unspecified."""

    @classmethod
    def from_lists(cls, managers: Sequence[str], ranges: Sequence[str]) -> EndpointSliceTrust:
        return cls(tuple(managers), tuple(ipaddress.ip_network(r, strict=False) for r in ranges))


def slice_refusal(slice_: dict[str, Any], service: dict[str, Any], trust: EndpointSliceTrust) -> str | None:
    """Why this slice must not be used for this Service, or None to use it."""
    manager = ((slice_.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY)
    if not manager:
        return f"no {MANAGED_BY} label"
    if manager not in trust.trusted_managers:
        return f"{MANAGED_BY}={manager} is not a trusted manager"
    has_selector = bool((service.get("spec") or {}).get("selector"))
    if manager == SLICE_CONTROLLER and not has_selector:
        return f"{MANAGED_BY}={manager} on a Service without a selector (that controller writes none for it)"
    if manager != SLICE_CONTROLLER and has_selector:
        return f"{MANAGED_BY}={manager} on a Service with a selector (its slices come from {SLICE_CONTROLLER})"
    return None


def address_refusal(address: str, address_type: str, trust: EndpointSliceTrust) -> str | None:
    """Why this endpoint address must not be used, or None to use it."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return f"address {address[:64]!r} is not an IP address"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:127.0.0.1 reaches 127.0.0.1 (Python 3.11 calls it not loopback)
    elif f"IPv{ip.version}" != address_type:
        return f"address {address} is not of the slice's addressType {address_type}"
    if ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_unspecified:
        return f"address {address} is loopback, link-local, multicast or unspecified"
    if trust.address_ranges and not any(ip in network for network in trust.address_ranges):
        return f"address {address} is outside addressRanges"
    return None
