"""The router: the last filter of every chain, which sends the request upstream."""

from __future__ import annotations

from typing import Any

from control_plane.translator.feature import HttpFeature
from control_plane.translator.settings import GatewaySettings

ROUTER_FILTER = "envoy.filters.http.router"
ROUTER_TYPE = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"


class Router(HttpFeature):
    name = ROUTER_FILTER

    def http_filter(self, settings: GatewaySettings) -> dict[str, Any] | None:
        # No x-envoy-* headers of its own (response_headers removes anyone else's).
        return {"name": ROUTER_FILTER, "typed_config": {"@type": ROUTER_TYPE, "suppress_envoy_headers": True}}
