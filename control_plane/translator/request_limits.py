"""Request size limits.

Headers: the HCM's ``max_request_headers_kb`` (Envoy answers 431). Body:
``envoy.filters.http.body_size_limit`` (Envoy 1.40), which checks ``content-length`` up
front and counts streamed bytes, answering 413, *without* buffering the request the way
the ``buffer`` filter does. xds-protos (1.85) trails Envoy's API and lacks this filter's
message, so ``protos/envoy/.../body_size_limit.proto`` (Envoy's definition, compiled by
scripts/gen-protos) registers it, unless xds-protos provides it.
"""

from __future__ import annotations

import importlib
from typing import Any

from control_plane.translator.feature import HttpFeature
from control_plane.translator.settings import GatewaySettings

BODY_SIZE_LIMIT_FILTER = "envoy.filters.http.body_size_limit"
BODY_SIZE_LIMIT_PACKAGE = "envoy.extensions.filters.http.body_size_limit.v3"
BODY_SIZE_LIMIT_TYPE = f"type.googleapis.com/{BODY_SIZE_LIMIT_PACKAGE}.BodySizeLimit"


def register_body_size_limit() -> None:
    """Make ``BodySizeLimit`` known to the default descriptor pool (for ``@type`` in typed_config):
    xds-protos' module if it has one, else ours (importing both would register it twice)."""
    try:
        importlib.import_module(f"{BODY_SIZE_LIMIT_PACKAGE}.body_size_limit_pb2")
    except ImportError:
        importlib.import_module(f"servicekit.protos.{BODY_SIZE_LIMIT_PACKAGE}.body_size_limit_pb2")


register_body_size_limit()


def body_size_limit_filter(max_request_bytes: int) -> dict[str, Any]:
    return {
        "name": BODY_SIZE_LIMIT_FILTER,
        "typed_config": {"@type": BODY_SIZE_LIMIT_TYPE, "max_request_bytes": str(max_request_bytes)},
    }


class RequestLimits(HttpFeature):
    """Headers are limited by the connection manager, bodies by this filter."""

    name = BODY_SIZE_LIMIT_FILTER

    def http_filter(self, settings: GatewaySettings) -> dict[str, Any] | None:
        if not settings.max_request_body_bytes:
            return None
        return body_size_limit_filter(settings.max_request_body_bytes)

    def connection_manager(self, settings: GatewaySettings) -> dict[str, Any]:
        # Oversized request headers: 431, before any filter runs.
        return {"max_request_headers_kb": settings.max_request_headers_kb}
