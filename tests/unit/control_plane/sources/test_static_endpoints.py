"""The static endpoints file: service -> ip:port, and which key a cluster takes its endpoints from."""

from __future__ import annotations

import pytest

from control_plane.errors import InvalidEndpointsError
from control_plane.sources.static_endpoints import StaticEndpointTable, parse_endpoints
from control_plane.translator import ClusterRef, Endpoint

FILE = "endpoints.yaml"


def problems_of(text: str) -> list[str]:
    with pytest.raises(InvalidEndpointsError) as excinfo:
        parse_endpoints(text, FILE)
    return [str(p) for p in excinfo.value.problems]


def test_the_documented_example() -> None:
    table = parse_endpoints(
        """
services:
  order-service:            # this service in any namespace
    - 127.0.0.1:18081
  shop/order-service-v3:    # only in namespace "shop"
    - {address: 127.0.0.1:18082, zone: zone-a, weight: 2}
  payments:9090:            # only for backends on port 9090
    - 127.0.0.1:18090
""",
        FILE,
    )
    assert table.endpoints_for(ClusterRef("shop", "order-service", 8080)) == (Endpoint("127.0.0.1", 18081),)
    assert table.endpoints_for(ClusterRef("shop", "order-service-v3", 8080)) == (Endpoint("127.0.0.1", 18082, "zone-a", 2),)
    assert table.endpoints_for(ClusterRef("other", "order-service-v3", 8080)) == ()
    assert table.endpoints_for(ClusterRef("shop", "payments", 9090)) == (Endpoint("127.0.0.1", 18090),)
    assert table.endpoints_for(ClusterRef("shop", "payments", 80)) == ()


def test_ipv6_and_several_addresses_sorted_and_deduplicated() -> None:
    table = parse_endpoints(
        "services:\n  svc: ['[::1]:8080', 10.0.0.2:80, 10.0.0.1:80, 10.0.0.2:80]\n", FILE
    )
    assert table.endpoints_for(ClusterRef("ns", "svc", 80)) == (
        Endpoint("10.0.0.1", 80),
        Endpoint("10.0.0.2", 80),
        Endpoint("::1", 8080),
    )


@pytest.mark.parametrize("text", ["", "# nothing\n", "services:\n", "services: {}\n"])
def test_empty_files_are_an_empty_table(text: str) -> None:
    assert parse_endpoints(text, FILE).entries == {}


def test_a_service_with_no_addresses_is_known_but_empty() -> None:
    table = parse_endpoints("services:\n  svc: []\n  svc:80: [127.0.0.1:1]\n", FILE)
    assert table.entries["svc"] == ()
    # "svc:80" is looked up before "svc", so the empty list does not hide it ...
    assert table.endpoints_for(ClusterRef("ns", "svc", 80)) == (Endpoint("127.0.0.1", 1),)
    # ... and for any other port the known-but-empty "svc" wins.
    assert table.endpoints_for(ClusterRef("ns", "svc", 81)) == ()


LOOKUP = """
services:
  shop/svc:8080: [10.0.0.1:1]
  shop/svc: [10.0.0.2:1]
  svc:8080: [10.0.0.3:1]
  svc: [10.0.0.4:1]
"""


@pytest.mark.parametrize(
    "ref, address",
    [
        (ClusterRef("shop", "svc", 8080), "10.0.0.1"),  # ns/svc:port
        (ClusterRef("shop", "svc", 9090), "10.0.0.2"),  # ns/svc
        (ClusterRef("other", "svc", 8080), "10.0.0.3"),  # svc:port
        (ClusterRef("other", "svc", 9090), "10.0.0.4"),  # svc
        (ClusterRef("shop", "nope", 8080), None),
    ],
)
def test_lookup_order(ref: ClusterRef, address: str | None) -> None:
    found = parse_endpoints(LOOKUP, FILE).endpoints_for(ref)
    assert [e.address for e in found] == ([address] if address else [])


def test_lookup_order_does_not_depend_on_file_order() -> None:
    reversed_text = "services:\n" + "\n".join(reversed(LOOKUP.strip().splitlines()[1:])) + "\n"
    a, b = parse_endpoints(LOOKUP, FILE), parse_endpoints(reversed_text, FILE)
    for ref in (ClusterRef("shop", "svc", 8080), ClusterRef("shop", "svc", 1), ClusterRef("x", "svc", 8080)):
        assert a.endpoints_for(ref) == b.endpoints_for(ref)


def test_tables_compare_by_content() -> None:
    assert parse_endpoints(LOOKUP, FILE) == parse_endpoints(LOOKUP, "elsewhere.yaml")
    assert parse_endpoints(LOOKUP, FILE) != StaticEndpointTable({})


@pytest.mark.parametrize(
    "text, expected",
    [
        ("services:\n  svc: [localhost:8080]\n", "services.svc[0]: 'localhost:8080' must be an IP address and port (EDS takes no host names)"),
        ("services:\n  svc: [orders.shop.svc.cluster.local:80]\n", "must be an IP address and port (EDS takes no host names)"),
        ("services:\n  svc: [127.0.0.1]\n", "services.svc[0]: '127.0.0.1' must be an IP address and port"),
        ("services:\n  svc: ['127.0.0.1:']\n", "services.svc[0]: '127.0.0.1:' needs a port from 1 to 65535"),
        ("services:\n  svc: ['127.0.0.1:0']\n", "services.svc[0]: '127.0.0.1:0' needs a port from 1 to 65535"),
        ("services:\n  svc: ['127.0.0.1:65536']\n", "needs a port from 1 to 65535"),
        ("services:\n  svc: ['127.0.0.1:http']\n", "needs a port from 1 to 65535"),
        ("services:\n  svc: ['256.0.0.1:80']\n", "must be an IP address and port"),
        ("services:\n  svc: [8080]\n", 'services.svc[0]: expected "ip:port"'),
        ("services:\n  svc: [{address: 127.0.0.1:80, region: eu}]\n", "services.svc[0]: unknown field(s) region"),
        ("services:\n  svc: [{address: 127.0.0.1:80, weight: 0}]\n", "services.svc[0].weight: must be an integer from 1 to 128"),
        ("services:\n  svc: [{address: 127.0.0.1:80, weight: 129}]\n", "services.svc[0].weight: must be an integer from 1 to 128"),
        ("services:\n  svc: [{address: 127.0.0.1:80, weight: true}]\n", "services.svc[0].weight: must be an integer from 1 to 128"),
        ("services:\n  svc: [{address: 127.0.0.1:80, zone: 3}]\n", "services.svc[0].zone: must be a string"),
        ("services:\n  svc: [{zone: a}]\n", 'services.svc[0].address: expected "ip:port"'),
        ("services:\n  svc: 127.0.0.1:80\n", "services.svc: expected a list of addresses"),
        ("services: [svc]\n", "services: expected a mapping of service to addresses"),
        ("endpoints: {}\n", "expected a mapping with one key, services"),
        ("services: {}\nextra: 1\n", "expected a mapping with one key, services"),
        ("- 127.0.0.1:80\n", "expected a mapping with one key, services"),
        ("services: {svc: [127.0.0.1:80\n", "invalid YAML"),
        # Keys are service, namespace/service, or either with :port; anything else never matched a cluster.
        ("services:\n  Order-Service: [127.0.0.1:80]\n", "services.Order-Service: keys are service, namespace/service, or either with :port"),
        ("services:\n  8080: [127.0.0.1:80]\n", "services.8080: keys are service, namespace/service, or either with :port"),
        ("services:\n  svc.shop: [127.0.0.1:80]\n", "services.svc.shop: keys are"),
        ("services:\n  a/b/c: [127.0.0.1:80]\n", "services.a/b/c: keys are"),
        ("services:\n  svc:http: [127.0.0.1:80]\n", "services.svc:http: keys are"),
        ("services:\n  shop/: [127.0.0.1:80]\n", "services.shop/: keys are"),
        ("services:\n  -svc: [127.0.0.1:80]\n", "services.-svc: keys are"),
        ("services:\n  ' svc': [127.0.0.1:80]\n", "keys are service, namespace/service, or either with :port"),
        ("services:\n  true: [127.0.0.1:80]\n", "services.True: keys are"),
        # The same service twice: the second list silently replaced the first.
        ("services:\n  svc: [127.0.0.1:1]\n  svc: [127.0.0.1:2]\n", "found duplicate key 'svc' (first on line 2)"),
    ],
)
def test_invalid_files(text: str, expected: str) -> None:
    problems = problems_of(text)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{FILE}: ")
    assert expected in problems[0], problems[0]


def test_every_bad_address_is_reported_at_once() -> None:
    problems = problems_of("services:\n  a: [localhost:80, 127.0.0.1:80]\n  b: ['10.0.0.1:0']\n  c: nope\n")
    assert problems == [
        f"{FILE}: services.a[0]: 'localhost:80' must be an IP address and port (EDS takes no host names)",
        f"{FILE}: services.b[0]: '10.0.0.1:0' needs a port from 1 to 65535",
        f"{FILE}: services.c: expected a list of addresses",
    ]


def test_on_and_yes_are_not_booleans_here_either() -> None:
    table = parse_endpoints("services:\n  svc: [{address: 127.0.0.1:80, zone: on}]\n", FILE)
    assert table.entries["svc"] == (Endpoint("127.0.0.1", 80, "on"),)


@pytest.mark.parametrize("key", ["svc", "order-service-v3", "shop/svc", "shop/svc:8080", "svc:1", "a1/b2:65535", "0svc"])
def test_valid_keys(key: str) -> None:
    assert parse_endpoints(f"services:\n  {key}: [127.0.0.1:80]\n", FILE).entries == {key: (Endpoint("127.0.0.1", 80),)}


def test_an_invalid_key_is_reported_with_the_other_problems() -> None:
    problems = problems_of("services:\n  Svc: [127.0.0.1:80]\n  ok: [localhost:80]\n")
    assert problems == [
        f"{FILE}: services.Svc: keys are service, namespace/service, or either with :port",
        f"{FILE}: services.ok[0]: 'localhost:80' must be an IP address and port (EDS takes no host names)",
    ]


@pytest.mark.parametrize("key", ["svc:0", "svc:65536", "shop/svc:99999"])
def test_a_key_port_outside_1_to_65535_is_refused(key: str) -> None:
    problems = problems_of(f"services:\n  {key}: [127.0.0.1:80]\n")
    assert problems == [f"{FILE}: services.{key}: keys are service, namespace/service, or either with :port"]


@pytest.mark.parametrize("key", ["svc:080", "shop/svc:0443"])
def test_a_key_port_with_a_leading_zero_is_refused(key: str) -> None:
    problems = problems_of(f"services:\n  {key}: [127.0.0.1:80]\n")
    assert problems == [f"{FILE}: services.{key}: keys are service, namespace/service, or either with :port"]
