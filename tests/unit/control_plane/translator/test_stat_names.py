"""Envoy stat names the translator chooses: Envoy's tag extraction must turn them into the
Prometheus labels dashboards group by (envoy_cluster_name, envoy_virtual_host, envoy_route)."""

from __future__ import annotations

import re

import pytest

from control_plane.config import ControlPlaneConfig
from control_plane.render import resource_data
from control_plane.translator.from_config import gateway_settings
from control_plane.translator import ClusterRef, GatewaySettings, RouteTranslator
from control_plane.translator.clusters import cluster_stat_name
from control_plane.translator.route_entries import route_stat_prefix
from control_plane.translator.virtual_hosts import vhost_name
from tests.unit.control_plane.translator.test_route_shields import route

# What Envoy's default tag extractors accept as one tag value (no '.', and [\w-] for vhosts).
ONE_SEGMENT = re.compile(r"^[^.]+$")
WORD = re.compile(r"^[\w-]+$")


@pytest.mark.parametrize(
    "domain, name",
    [("api.example.com", "host_api_example_com"), ("*.example.com", "host___example_com"), ("a-b.c", "host_a-b_c")],
)
def test_vhost_names_are_word_characters(domain: str, name: str) -> None:
    assert vhost_name(domain) == name and WORD.match(name)


def test_distinct_domains_never_share_a_vhost_name() -> None:
    domains = ["a.b.com", "a-b.com", "ab.com", "*.b.com", "x.b.com", "*.com", "com"]
    assert len({vhost_name(d) for d in domains}) == len(domains)


def test_cluster_and_route_stat_names_are_one_segment() -> None:
    name = cluster_stat_name(ClusterRef("shop", "order-service", 8080))
    assert name == "shop_order-service_8080" and ONE_SEGMENT.match(name)
    prefix = route_stat_prefix(route())
    assert prefix == "shop/r" and ONE_SEGMENT.match(prefix)


def test_every_entry_carries_the_route_stat_prefix_unless_switched_off() -> None:
    def prefixes(settings: GatewaySettings) -> set[str | None]:
        [config] = [resource_data(r) for r in RouteTranslator(settings).translate([route(auth={"required": False})]).routes]
        return {e.get("stat_prefix") for vhost in config["virtual_hosts"] for e in vhost["routes"]}

    assert prefixes(GatewaySettings()) == {"shop/r"}
    assert prefixes(GatewaySettings(route_stats=False)) == {None}
    config = ControlPlaneConfig.model_validate({"gateway": {"routeStats": False}, "sources": {}})
    assert gateway_settings(config, config.gateway).route_stats is False
