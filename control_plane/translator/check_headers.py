"""The request headers Envoy sends the Authorization service; it is sent no others."""

from __future__ import annotations

from control_plane.translator.identity_headers import ROUTE_HEADER
from control_plane.translator.settings import ExtAuthzSettings
from control_plane.translator.waiting_room import TICKET_CARRIERS
from servicekit.check_contract import API_KEY_HEADER as API_KEY_HEADER
from servicekit.check_contract import FORWARDED_FOR

FORWARDED_HEADERS = ("authorization", "x-request-id")
"""What the Authorization service reads; everything else stays out of the CheckRequest."""
CONTENT_TYPE = "content-type"
HTTP_FORWARDED_HEADERS = (*FORWARDED_HEADERS, ROUTE_HEADER, FORWARDED_FOR, API_KEY_HEADER, *TICKET_CARRIERS, CONTENT_TYPE)
"""Over HTTP it also reads the route, the client address Envoy appended, an API key, a
waiting room's ticket (its header or its cookie), and the content-type a route's body
rule needs (the body must be sent as JSON, or the upstream reads what was not validated).
Envoy's list is the filter's, not the route's: every check is sent the content-type, and
only a route with a body rule reads it."""


def forwarded_to_check(authz: ExtAuthzSettings, base: tuple[str, ...] = HTTP_FORWARDED_HEADERS) -> frozenset[str]:
    """Every request header the HTTP check sees, lower case: ``base`` and ``forwardHeaders``."""
    return frozenset(h.lower() for h in (*base, *authz.forward_headers))
