"""The key of a ``varyByUser`` cache entry: the client's host with the verified caller
appended, ``<host>|<caller>``, on a host no client can send.

Envoy's cache keys an entry on scheme, ``:authority`` and the raw ``:path`` (query
included, byte for byte); it offers no per-request key of its own, and Vary-keyed entries
crash Envoy 1.40 (``response_cache``). So the caller goes into the host:

- ``|`` is not a character an authority may hold, and Envoy answers a Host with one 400
  before any filter runs (checked, HTTP/1.1; HTTP/2's codec validates ``:authority``
  the same way). No client-reachable entry (a public cached route on the same path,
  another caller's) can share a per-user key, and the first ``|`` splits host from
  caller, so two callers never share one;
- the path and query are not touched. The key was once a query parameter, set and
  removed with ``query_parameter_mutations``, which rebuilt every query from decoded
  parameters: ``%26`` became ``&``, a new parameter (issue 33).

Lua, because ``header_mutation`` refuses to change ``:authority`` (Envoy rejects the
config: ":-prefixed or host headers may not be modified"). Two small scripts:
``KEY_FILTER`` in the listener's chain, on only for ``varyByUser`` routes, appends the
caller; ``host_filter`` in the upstream chain of a cached route's cluster cuts the host
at its first ``|`` again, so the upstream sees the client's Host (the cache fetches a miss
itself, past the route action, so only the cluster's upstream chain sees every request).
A request without ``|`` in its host passes that filter unchanged: every other route's.
"""

from __future__ import annotations

from typing import Any

from servicekit.check_contract import PRINCIPAL_HEADER

LUA_TYPE = "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua"
KEY_FILTER = "gatehouse.cache_key"
HOST_FILTER = "gatehouse.cache_host"
KEY_HEADER = PRINCIPAL_HEADER
"""Whatever the check sets to name the caller with its source (issuer or API key), so
two issuers' user ``123`` never share an entry."""
SEPARATOR = "|"
"""Between host and caller: not a character an authority may hold."""

_APPEND = f"""
function envoy_on_request(handle)
  local headers = handle:headers()
  local caller = headers:get("{KEY_HEADER}")
  if caller ~= nil then
    headers:replace(":authority", headers:get(":authority") .. "{SEPARATOR}" .. caller)
  end
end
"""
_CUT = f"""
function envoy_on_request(handle)
  local headers = handle:headers()
  local host = headers:get(":authority")
  local cut = host and string.find(host, "{SEPARATOR}", 1, true)
  if cut then
    headers:replace(":authority", string.sub(host, 1, cut - 1))
  end
end
"""


def _lua(name: str, code: str, *, disabled: bool) -> dict[str, Any]:
    config: dict[str, Any] = {
        "@type": LUA_TYPE,
        "default_source_code": {"inline_string": code},
        # The route was chosen for the client's host; a changed host must not choose again
        # (it would match no named host and could fall to a host-less route).
        "clear_route_cache": False,
    }
    entry: dict[str, Any] = {"name": name, "typed_config": config}
    if disabled:
        entry["disabled"] = True
    return entry


def key_filter() -> dict[str, Any]:
    """Off in the chain; on for ``varyByUser`` routes (after the check set ``KEY_HEADER``)."""
    return _lua(KEY_FILTER, _APPEND, disabled=True)


def host_filter() -> dict[str, Any]:
    """The cluster's upstream filter that gives the upstream the client's host back."""
    return _lua(HOST_FILTER, _CUT, disabled=False)
