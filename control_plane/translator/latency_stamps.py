"""Where a request's time went, for the access log: two ``set_filter_state`` filters.

Envoy's ALS entry has the total and the upstream times but not the time spent in the
checks before the router. These filters, only when the access log is on, write
filter-state strings that the ALS logger sends (``filter_state_objects_to_log``) and
telemetry turns into ``latency_ms.auth`` and ``latency_ms.rate_limit``:

- after ext_authz: its own measured call latency (``ExtAuthzLoggingInfo`` of each
  ext_authz filter, ``emit_filter_state_stats``) in µs, and the time (µs) the
  rate-limit stage starts;
- after the ratelimit filter: the time it ends. The difference is the rate-limit stage:
  ratelimit_svc's call when the route has one, a few µs of filter work otherwise.

A request refused by a filter stops there: the stamps after it are not written (a 401
has no ``rate_limit``; the check's time is then most of ``total``).
"""

from __future__ import annotations

from typing import Any

from control_plane.translator.ext_authz import EXT_AUTHZ_FILTER, PUBLIC_LIMITS_FILTER
from control_plane.translator.feature import HttpFeature
from control_plane.translator.settings import GatewaySettings

SET_FILTER_STATE = "envoy.filters.http.set_filter_state"
SET_FILTER_STATE_TYPE = "type.googleapis.com/envoy.extensions.filters.http.set_filter_state.v3.Config"
AUTH_US = "gatehouse.latency.auth_us"
"""Envoy's latency of the authentication check (µs)."""
PUBLIC_LIMITS_US = "gatehouse.latency.public_limits_us"
"""Envoy's latency of the public-route-limits check (µs): a public route's rate limits."""
RATE_LIMIT_START = "gatehouse.latency.rate_limit_start"
RATE_LIMIT_END = "gatehouse.latency.rate_limit_end"
"""Wall-clock seconds with 6 decimals around the ratelimit filter."""
STAMP_KEYS = (AUTH_US, PUBLIC_LIMITS_US, RATE_LIMIT_START, RATE_LIMIT_END)
"""The ALS logger's ``filter_state_objects_to_log``."""
_NOW = "%EMIT_TIME(%s.%6f)%"


def _value(key: str, format_string: str) -> dict[str, Any]:
    return {
        "object_key": key,
        "factory_key": "envoy.string",
        "format_string": {"text_format_source": {"inline_string": format_string}, "omit_empty_values": True},
        "skip_if_empty": True,
    }


def _filter(name: str, values: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": name, "typed_config": {"@type": SET_FILTER_STATE_TYPE, "on_request_headers": values}}


def _logged(settings: GatewaySettings) -> bool:
    return settings.access_log is not None and (settings.ext_authz is not None or settings.rate_limit is not None)


class AuthStamp(HttpFeature):
    """After the ext_authz filters: their latencies, and the rate-limit stage's start."""

    name = "gatehouse.latency.after_auth"

    def http_filter(self, settings: GatewaySettings) -> dict[str, Any] | None:
        if not _logged(settings):
            return None
        values = []
        if settings.ext_authz is not None:
            values.append(_value(AUTH_US, f"%FILTER_STATE({EXT_AUTHZ_FILTER}:FIELD:latency_us)%"))
            values.append(_value(PUBLIC_LIMITS_US, f"%FILTER_STATE({PUBLIC_LIMITS_FILTER}:FIELD:latency_us)%"))
        if settings.rate_limit is not None:
            values.append(_value(RATE_LIMIT_START, _NOW))
        return _filter(self.name, values)


class RateLimitStamp(HttpFeature):
    """After the ratelimit filter: the rate-limit stage's end."""

    name = "gatehouse.latency.after_rate_limit"

    def http_filter(self, settings: GatewaySettings) -> dict[str, Any] | None:
        if not _logged(settings) or settings.rate_limit is None:
            return None
        return _filter(self.name, [_value(RATE_LIMIT_END, _NOW)])
