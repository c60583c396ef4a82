"""The response cache's translation: the filter off in the chain and on only for cached
routes, the ttl carried to the cluster's upstream filter, the route timeout as the stream's
limit, and the cluster filter only on the clusters of cached routes."""

from __future__ import annotations

from typing import Any

import yaml
from google.protobuf import json_format

from control_plane.model import Origin, Route, parse_route_file
from control_plane.translator import GatewaySettings
from control_plane.translator.clusters import cluster, cluster_policies
from control_plane.translator.listeners import http_filters
from control_plane.translator.names import ClusterRef
from control_plane.translator.cache_key import HOST_FILTER
from control_plane.translator.response_cache import (
    CACHE_FILTER,
    CACHE_REQUEST_FILTER,
    CACHE_TTL_FILTER,
    TTL_HEADER,
)
from control_plane.translator.route_entries import cluster_refs, route_entries


def route(name: str, **extra: Any) -> Route:
    spec = {"match": {"pathPrefix": f"/{name}"}, "backends": [{"service": name, "port": 8080}], **extra}
    text = yaml.safe_dump({"apiVersion": "gatehouse.io/v1alpha1", "kind": "Route",
                           "metadata": {"name": name, "namespace": "shop"}, "spec": spec})
    routes, problems = parse_route_file(text, Origin("file", "r.yaml"))
    assert problems == [], [str(p) for p in problems]
    return routes[0]


def entry(r: Route) -> dict[str, Any]:
    [only] = route_entries(r, GatewaySettings())
    data: dict[str, Any] = json_format.MessageToDict(only, preserving_proto_field_name=True)
    return data


CACHED = {"auth": {"required": False}, "cache": {"ttl": "2m"}, "timeouts": {"request": "4s"}}


def test_the_cache_filter_is_off_in_the_chain_just_before_the_router() -> None:
    chain = http_filters(GatewaySettings())
    names = [f["name"] for f in chain]
    assert names[-3:] == [CACHE_REQUEST_FILTER, CACHE_FILTER, "envoy.filters.http.router"]
    cache = chain[-2]
    assert cache["disabled"] is True and chain[-3]["disabled"] is True
    config = cache["typed_config"]
    assert config["typed_config"]["@type"].endswith("SimpleHttpCacheConfig")
    assert "allowed_vary_headers" not in config, "Vary-keyed entries crash Envoy 1.40's cache"
    assert config["ignore_request_cache_control_header"] is True


def test_a_cached_route_turns_the_filter_on_and_carries_its_ttl() -> None:
    data = entry(route("catalog", **CACHED))
    per_filter = data["typed_per_filter_config"]
    assert per_filter[CACHE_FILTER]["@type"].endswith("envoy.config.route.v3.FilterConfig")
    assert "config" in per_filter[CACHE_FILTER], "an empty config enables a filter the chain has off"
    mutations = per_filter[CACHE_REQUEST_FILTER]["mutations"]["request_mutations"]
    assert {"append": {"header": {"key": TTL_HEADER, "value": "max-age=120"},
                       "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}} in mutations
    assert {"remove": "x-gatehouse-route"} in mutations
    assert data["route"]["max_stream_duration"] == {"max_stream_duration": "4s"}


def test_a_route_without_cache_leaves_the_filter_off() -> None:
    data = entry(route("plain", auth={"required": False}))
    assert CACHE_FILTER not in data.get("typed_per_filter_config", {})
    assert CACHE_REQUEST_FILTER not in data.get("typed_per_filter_config", {})
    assert "max_stream_duration" not in data["route"]


def test_only_the_clusters_of_cached_routes_get_the_ttl_filter() -> None:
    cached, plain = route("catalog", **CACHED), route("plain", auth={"required": False})
    refs = {r: tuple(cluster_refs(r)) for r in (cached, plain)}
    policies, rejected = cluster_policies([cached, plain], refs)
    assert rejected == {}
    [cached_ref], [plain_ref] = refs[cached], refs[plain]
    assert policies[cached_ref].cache and plain_ref not in policies
    data = json_format.MessageToDict(cluster(cached_ref, policies[cached_ref]), preserving_proto_field_name=True)
    options = data["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
    filters = options["http_filters"]
    # The cache_key's host filter after it: a per-user entry's upstream gets the client's host.
    assert [f["name"] for f in filters] == [CACHE_TTL_FILTER, HOST_FILTER, "envoy.filters.http.upstream_codec"]
    added = filters[0]["typed_config"]["mutations"]["response_mutations"][0]["append"]
    assert added["header"] == {"key": "cache-control", "value": f"%REQ({TTL_HEADER})%"}
    assert added["append_action"] == "ADD_IF_ABSENT", "the upstream's own Cache-Control wins"
    plain_cluster = json_format.MessageToDict(cluster(ClusterRef("shop", "plain", 8080)))
    assert "typed_extension_protocol_options" not in plain_cluster


def test_a_client_copy_of_the_ttl_header_is_removed_on_every_route() -> None:
    strip = http_filters(GatewaySettings())[1]
    removed = [m["remove"] for m in strip["typed_config"]["mutations"]["request_mutations"]]
    assert TTL_HEADER in removed
