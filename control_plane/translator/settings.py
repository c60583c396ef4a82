"""What the translator needs to know about the gateway besides the routes."""

from __future__ import annotations

from dataclasses import dataclass

from control_plane.translator.access_log import AccessLogSettings
from control_plane.translator.ext_authz import ExtAuthzSettings
from control_plane.translator.ratelimit import RateLimitSettings


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    listener_address: str = "0.0.0.0"
    listener_port: int = 8080
    ext_authz: ExtAuthzSettings | None = None
    rate_limit: RateLimitSettings | None = None
    access_log: AccessLogSettings | None = None
