"""Request size limits and the response headers the gateway never lets out.

Headers: the HCM's ``max_request_headers_kb`` (Envoy answers 431). Body:
``envoy.filters.http.body_size_limit`` (Envoy 1.40), which checks ``content-length`` up
front and counts streamed bytes, answering 413, *without* buffering the request the way
the ``buffer`` filter does. xds-protos (1.85) trails Envoy's API and lacks this filter's
message, so its descriptor is registered here, exactly as Envoy 1.40 defines it (one
``UInt64Value max_request_bytes = 1``), unless xds-protos provides it.

Responses: the router's ``suppress_envoy_headers`` stops it adding ``x-envoy-*`` headers
(``x-envoy-upstream-service-time``, ...); a ``header_mutation`` filter removes any
``x-envoy-*`` header an upstream or another filter put on a response, and the upstream's
``server`` header (the HCM then sets its own, or none).
"""

from __future__ import annotations

import importlib
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, wrappers_pb2

BODY_SIZE_LIMIT_FILTER = "envoy.filters.http.body_size_limit"
BODY_SIZE_LIMIT_PACKAGE = "envoy.extensions.filters.http.body_size_limit.v3"
BODY_SIZE_LIMIT_TYPE = f"type.googleapis.com/{BODY_SIZE_LIMIT_PACKAGE}.BodySizeLimit"
RESPONSE_HEADERS_FILTER = "gatehouse.response_headers"
HEADER_MUTATION_TYPE = "type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation"
INTERNAL_RESPONSE_HEADER_PREFIX = "x-envoy-"


def register_body_size_limit() -> None:
    """Make ``BodySizeLimit`` known to the default descriptor pool (for ``@type`` in typed_config)."""
    pool = descriptor_pool.Default()
    try:
        pool.FindMessageTypeByName(f"{BODY_SIZE_LIMIT_PACKAGE}.BodySizeLimit")
        return
    except KeyError:
        pass
    try:
        importlib.import_module(f"{BODY_SIZE_LIMIT_PACKAGE}.body_size_limit_pb2")
        return
    except ImportError:
        pass
    wrappers_file = wrappers_pb2.DESCRIPTOR.name
    proto = descriptor_pb2.FileDescriptorProto(
        name="envoy/extensions/filters/http/body_size_limit/v3/body_size_limit.proto",
        package=BODY_SIZE_LIMIT_PACKAGE,
        syntax="proto3",
        dependency=[wrappers_file],
    )
    message = proto.message_type.add(name="BodySizeLimit")
    message.field.add(
        name="max_request_bytes",
        json_name="maxRequestBytes",
        number=1,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
        type_name=".google.protobuf.UInt64Value",
    )
    pool.Add(proto)


register_body_size_limit()


def body_size_limit_filter(max_request_bytes: int) -> dict[str, Any]:
    return {
        "name": BODY_SIZE_LIMIT_FILTER,
        "typed_config": {"@type": BODY_SIZE_LIMIT_TYPE, "max_request_bytes": str(max_request_bytes)},
    }


def response_headers_filter(*, remove_server: bool) -> dict[str, Any]:
    """Removes internal headers from every response, upstream-generated or local."""
    mutations: list[dict[str, Any]] = [
        {"remove_on_match": {"key_matcher": {"prefix": INTERNAL_RESPONSE_HEADER_PREFIX, "ignore_case": True}}}
    ]
    if remove_server:
        mutations.append({"remove": "server"})
    return {
        "name": RESPONSE_HEADERS_FILTER,
        "typed_config": {"@type": HEADER_MUTATION_TYPE, "mutations": {"response_mutations": mutations}},
    }
