"""What the gateway (Envoy, as the control plane configures it) and the authorization check
agree on: the headers each side reads or writes, the request headers only the check may
write, the ones reserved to Gatehouse, and the bodies of the answers Envoy passes on.

Both sides import these names; a route may neither set, remove nor match on them
(``control_plane/model/headers.py``, ``match.py``), and Envoy removes every client copy of the identity
headers before any filter reads them (``control_plane/translator/identity_headers.py``).
"""

from __future__ import annotations

from typing import Final

IDENTITY_HEADERS: Final = ("x-user-id", "x-user-role", "x-scope", "x-consumer", "x-principal")
"""Set only by the check, from a verified token's claims or an API key's consumer."""
USER_ID_HEADER: Final = IDENTITY_HEADERS[0]
"""The user id as its source knows it (a token's mapped claim, ``sub`` by default, or an API
key's consumer): what upstreams have always read. Not unique across sources: issuer A's
``123``, issuer B's ``123`` and a consumer named ``123`` share it."""
PRINCIPAL_HEADER: Final = IDENTITY_HEADERS[4]
"""The caller named with its source (``ext_authz/tokens/principal.py``): ``jwt;<issuer,
percent-encoded>;<user id>`` or ``apikey;<consumer>``. No two principals share it, so
everything keyed per caller keys on it: ``user`` rate limits, ``varyByUser`` cache entries,
and an upstream that serves callers of more than one source should authorize on it."""
INTERNAL_PREFIX: Final = "x-gatehouse-"
"""Headers between Gatehouse's own parts (the route's name for the check, a waiting room's
ticket, the cache's freshness): never a client's, never a route's."""
VOUCHED_HEADERS: Final = (*IDENTITY_HEADERS, "authorization", "host", "x-forwarded-for")
"""What the gateway vouches for to the upstream: who called (identity, the token it
checked), where to (host, the routing key) and from where (the client address it
appended). A route's header rules may not set or remove them."""
ENVOY_PREFIX: Final = "x-envoy-"

CONSUMER_HEADER: Final = IDENTITY_HEADERS[3]
"""An API key's consumer (the check's ``api_keys``)."""
ROUTE_HEADER: Final = "x-gatehouse-route"
"""Names the route to the HTTP check; Envoy sets it per route after removing a client's copy."""
API_KEY_HEADER: Final = "x-api-key"
"""Where a client sends an API key; removed before the request goes upstream."""
TICKET_HEADER: Final = "x-gatehouse-ticket"
"""A waiting room's ticket, for clients without cookies; removed before the upstream."""
WAITING_ROOM_HEADER: Final = "x-gatehouse-waiting-room"
"""On the check's 429 for a waiting client: Envoy's local reply turns it into the room's 503."""
UPSTREAM_TOKEN_UNAVAILABLE_HEADER: Final = "x-gatehouse-upstream-token"  # noqa: S105 - a header name
"""On the check's 424 when token swap has no token: Envoy's local reply makes it a 503."""
FORWARDED_FOR: Final = "x-forwarded-for"
"""Envoy appends the client's address (``use_remote_address``); the check reads the last entry."""
HEADERS_TO_REMOVE: Final = "x-envoy-auth-headers-to-remove"
"""The check lists here the identity headers it filled none of, for Envoy to remove."""
RATE_LIMITED: Final = ("rate_limited", "Too many requests; retry later.")
"""The code and message of every 429 the gateway answers, whichever path limited it."""


def reserved_for_routes(name: str) -> str | None:
    """Why a route may not set or remove this request header (lower case), or None."""
    if name in IDENTITY_HEADERS:
        return f"{name} is an identity header: only the authorization check sets it, from a verified credential"
    if name in VOUCHED_HEADERS:
        return f"{name} is what the gateway vouches for to the upstream; a route cannot change it"
    if name.startswith((INTERNAL_PREFIX, ENVOY_PREFIX)):
        return f"{name} is internal to the gateway ({INTERNAL_PREFIX}*, {ENVOY_PREFIX}*)"
    return None


def unmatchable(name: str) -> str | None:
    """Why a route may not match on this request header (lower case), or None: Envoy picks
    the route before the identity filter removes a client's copy, so a condition on it
    would be met by whatever the client sends."""
    if name in IDENTITY_HEADERS:
        return f"{name} is an identity header, and a route is chosen before the client's copy is removed"
    if name.startswith(INTERNAL_PREFIX):
        return f"{name} is internal to the gateway ({INTERNAL_PREFIX}*)"
    return None
