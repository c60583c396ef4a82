"""Which EndpointSlices and addresses are used: the EndpointSlice controller's for a Service
with a selector; others only if the operator trusts their manager, for selector-less
Services; never loopback, link-local, multicast or unspecified addresses, nor any outside
``addressRanges`` when it is set. What was used before (the controller's slices of a
selector Service, ready endpoints only) stays used."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from control_plane.config import load_config

from control_plane.sources.kubernetes.endpoint_trust import (
    MIRRORING_CONTROLLER,
    SLICE_CONTROLLER,
    EndpointSliceTrust,
    address_refusal,
    slice_refusal,
)
from control_plane.sources.kubernetes.endpoints import KubernetesEndpoints
from control_plane.translator import ClusterRef, Endpoint
from servicekit.errors import ConfigError

HTTP = ClusterRef("shop", "orders", 8080)


def service(*, selector: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"ports": [{"name": "http", "port": 8080}]}
    if selector:
        spec["selector"] = {"app": "orders"}
    return {"metadata": {"name": "orders", "namespace": "shop"}, "spec": spec}


def slice_(name: str, manager: str | None, *addresses: str, address_type: str = "IPv4") -> dict[str, Any]:
    labels = {"kubernetes.io/service-name": "orders"}
    if manager is not None:
        labels["endpointslice.kubernetes.io/managed-by"] = manager
    return {
        "metadata": {"name": name, "namespace": "shop", "labels": labels},
        "addressType": address_type,
        "ports": [{"name": "http", "port": 9000}],
        "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addresses],
    }


def table(trust: EndpointSliceTrust, svc: dict[str, Any], *slices: dict[str, Any]) -> KubernetesEndpoints:
    out = KubernetesEndpoints(trust)
    out.apply_services({"shop/orders": svc})
    out.apply_slices({f"shop/{s['metadata']['name']}": s for s in slices})
    return out


def test_by_default_only_the_slice_controllers_slices_of_a_selector_service_are_used() -> None:
    endpoints = table(
        EndpointSliceTrust(),
        service(selector=True),
        slice_("managed", SLICE_CONTROLLER, "10.0.0.1"),
        slice_("unlabelled", None, "10.9.0.1"),
        slice_("mirrored", MIRRORING_CONTROLLER, "10.9.0.2"),
        slice_("tool", "someones-tool", "10.9.0.3"),
    )
    assert endpoints.endpoints_for(HTTP) == (Endpoint("10.0.0.1", 9000),)


def test_a_slice_claiming_the_controller_for_a_selector_less_service_is_forged() -> None:
    endpoints = table(EndpointSliceTrust(), service(selector=False), slice_("forged", SLICE_CONTROLLER, "10.0.0.1"))
    assert endpoints.knows(HTTP)
    assert endpoints.endpoints_for(HTTP) == ()
    assert "without a selector" in (slice_refusal(slice_("forged", SLICE_CONTROLLER), service(selector=False), EndpointSliceTrust()) or "")


def test_a_trusted_other_manager_serves_selector_less_services_only() -> None:
    trust = EndpointSliceTrust(trusted_managers=(SLICE_CONTROLLER, MIRRORING_CONTROLLER, "examples.gatehouse.io"))
    for manager in (MIRRORING_CONTROLLER, "examples.gatehouse.io"):
        assert table(trust, service(selector=False), slice_("s", manager, "10.0.0.7")).endpoints_for(HTTP) == (Endpoint("10.0.0.7", 9000),)
        assert table(trust, service(selector=True), slice_("s", manager, "10.0.0.7")).endpoints_for(HTTP) == ()


@pytest.mark.parametrize(
    ("address", "address_type", "why"),
    [
        ("127.0.0.1", "IPv4", "loopback"),
        ("::1", "IPv6", "loopback"),
        ("::ffff:127.0.0.1", "IPv6", "loopback"),
        ("169.254.169.254", "IPv4", "link-local"),
        ("fe80::1", "IPv6", "link-local"),
        ("0.0.0.0", "IPv4", "unspecified"),
        ("224.0.0.1", "IPv4", "multicast"),
        ("orders.example.com", "IPv4", "not an IP address"),
        ("10.0.0.1", "IPv6", "addressType"),
    ],
)
def test_addresses_that_reach_the_gateway_itself_or_nothing_are_refused(address: str, address_type: str, why: str) -> None:
    refused = address_refusal(address, address_type, EndpointSliceTrust())
    assert refused is not None and why in refused


def test_address_ranges_bound_where_a_trusted_slice_may_point() -> None:
    trust = EndpointSliceTrust.from_lists([SLICE_CONTROLLER], ["10.244.0.0/16", "fd00:10::/64"])
    endpoints = table(trust, service(selector=True), slice_("managed", SLICE_CONTROLLER, "10.244.1.5", "10.96.0.10", "192.168.1.1"))
    assert endpoints.endpoints_for(HTTP) == (Endpoint("10.244.1.5", 9000),)
    assert address_refusal("fd00:10::5", "IPv6", trust) is None
    assert "outside addressRanges" in (address_refusal("fd00:11::5", "IPv6", trust) or "")


def test_a_service_gaining_a_selector_switches_which_slices_count() -> None:
    endpoints = table(EndpointSliceTrust(), service(selector=False), slice_("managed", SLICE_CONTROLLER, "10.0.0.1"))
    assert endpoints.endpoints_for(HTTP) == ()
    endpoints.apply_services({"shop/orders": service(selector=True)})
    assert endpoints.endpoints_for(HTTP) == (Endpoint("10.0.0.1", 9000),)


@pytest.mark.parametrize(
    ("setting", "field"),
    [
        ("{addressRanges: [not-a-range]}", "sources.kubernetes.endpointSlices.addressRanges[0]"),
        ("{addressRanges: [10.244.0.1/16]}", "sources.kubernetes.endpointSlices.addressRanges[0]"),
        ("{trustedManagers: ['']}", "sources.kubernetes.endpointSlices.trustedManagers[0]"),
        ("{trustedManager: [x]}", "sources.kubernetes.endpointSlices.trustedManager"),
    ],
)
def test_a_bad_setting_names_the_file_and_the_field(tmp_path: Path, setting: str, field: str) -> None:
    config = tmp_path / "control-plane.yaml"
    config.write_text(f"sources:\n  kubernetes: {{endpointSlices: {setting}}}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    assert str(config) in str(caught.value) and field in str(caught.value), str(caught.value)


def test_the_settings_reach_the_table(tmp_path: Path) -> None:
    config = tmp_path / "control-plane.yaml"
    config.write_text("sources:\n  kubernetes: {endpointSlices: {trustedManagers: [examples.gatehouse.io], addressRanges: [10.244.0.0/16]}}\n")
    kube = load_config(config).sources.kubernetes
    assert kube is not None
    trust = EndpointSliceTrust.from_lists(kube.endpoint_slices.trusted_managers, [str(r) for r in kube.endpoint_slices.address_ranges])
    assert trust.trusted_managers == ("examples.gatehouse.io",)
    assert address_refusal("10.244.3.3", "IPv4", trust) is None and address_refusal("10.245.3.3", "IPv4", trust) is not None
    default = load_config(_written(tmp_path / "default.yaml", "sources:\n  kubernetes: {}\n")).sources.kubernetes
    assert default is not None and default.endpoint_slices.trusted_managers == [SLICE_CONTROLLER]


def _written(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
