"""Dicts shaped like Envoy's documented JSON → typed messages.

``ParseDict`` rejects unknown fields, so a typo in the translator fails loudly in tests
instead of reaching Envoy. Importing the extension modules registers their types for
``@type`` in ``typed_config``.
"""

from __future__ import annotations

from typing import Any, TypeVar

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2
from envoy.config.trace.v3 import opentelemetry_pb2  # noqa: F401
from envoy.extensions.access_loggers.grpc.v3 import als_pb2  # noqa: F401
from envoy.extensions.access_loggers.filters.cel.v3 import cel_pb2  # noqa: F401
from envoy.extensions.filters.http.adaptive_concurrency.v3 import adaptive_concurrency_pb2  # noqa: F401
from envoy.extensions.filters.http.admission_control.v3 import admission_control_pb2  # noqa: F401
from envoy.extensions.filters.http.cache.v3 import cache_pb2  # noqa: F401
from envoy.extensions.filters.http.ext_authz.v3 import ext_authz_pb2  # noqa: F401
from envoy.extensions.filters.http.header_mutation.v3 import header_mutation_pb2  # noqa: F401
from envoy.extensions.filters.http.local_ratelimit.v3 import local_rate_limit_pb2  # noqa: F401
from envoy.extensions.filters.http.lua.v3 import lua_pb2  # noqa: F401
from envoy.extensions.filters.http.ratelimit.v3 import rate_limit_pb2  # noqa: F401
from envoy.extensions.filters.http.rbac.v3 import rbac_pb2  # noqa: F401
from envoy.extensions.filters.http.router.v3 import router_pb2  # noqa: F401
from envoy.extensions.filters.http.set_filter_state.v3 import set_filter_state_pb2  # noqa: F401
from envoy.extensions.filters.http.upstream_codec.v3 import upstream_codec_pb2  # noqa: F401
from envoy.extensions.http.cache.simple_http_cache.v3 import config_pb2 as simple_http_cache_pb2  # noqa: F401
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2
from envoy.extensions.path.match.uri_template.v3 import uri_template_match_pb2  # noqa: F401
from envoy.extensions.path.rewrite.uri_template.v3 import uri_template_rewrite_pb2  # noqa: F401
from envoy.extensions.retry.host.previous_hosts.v3 import previous_hosts_pb2  # noqa: F401
from envoy.extensions.transport_sockets.tls.v3 import secret_pb2, tls_pb2  # noqa: F401
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2  # noqa: F401
from xds.type.v3 import typed_struct_pb2  # noqa: F401
from google.protobuf import json_format
from google.protobuf.message import Message

M = TypeVar("M", bound=Message)

Cluster = cluster_pb2.Cluster
ClusterLoadAssignment = endpoint_pb2.ClusterLoadAssignment
Listener = listener_pb2.Listener
RouteConfiguration = route_pb2.RouteConfiguration
VirtualHost = route_components_pb2.VirtualHost
RouteEntry = route_components_pb2.Route
HttpConnectionManager = http_connection_manager_pb2.HttpConnectionManager
Secret = secret_pb2.Secret

HEADER_MUTATION_TYPE = "type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation"
"""``header_mutation``: the identity-header strip, the response-header filter and HSTS are all one."""


def parse(kind: type[M], data: dict[str, Any]) -> M:
    message: M = json_format.ParseDict(data, kind())
    return message
