"""The response headers the gateway never lets out, and its own ``server`` header.

The router's ``suppress_envoy_headers`` stops it adding ``x-envoy-*`` headers
(``x-envoy-upstream-service-time``, ...); a ``header_mutation`` filter removes any
``x-envoy-*`` header an upstream or another filter put on a response, and the upstream's
``server`` header (the HCM then sets its own, or none).
"""

from __future__ import annotations

from typing import Any

from control_plane.translator.feature import HttpFeature
from control_plane.translator.messages import HEADER_MUTATION_TYPE as HEADER_MUTATION_TYPE
from control_plane.translator.settings import GatewaySettings

RESPONSE_HEADERS_FILTER = "gatehouse.response_headers"
INTERNAL_RESPONSE_HEADER_PREFIX = "x-envoy-"


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


class ResponseHeaders(HttpFeature):
    name = RESPONSE_HEADERS_FILTER

    def http_filter(self, settings: GatewaySettings) -> dict[str, Any] | None:
        return response_headers_filter(remove_server=not settings.server_header)

    def connection_manager(self, settings: GatewaySettings) -> dict[str, Any]:
        if settings.server_header:
            return {"server_name": settings.server_header, "server_header_transformation": "OVERWRITE"}
        # Nothing added here; the upstream's own is removed by the response-header filter.
        return {"server_header_transformation": "PASS_THROUGH"}
