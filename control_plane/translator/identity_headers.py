"""Identity headers: client-sent copies of what ext_authz sets are removed, on every route.

(The response cache's internal request header, ``CACHE_HEADERS``, too: a client's copy
would set an answer's Cache-Control.)

Only headers: the query is never touched here. Envoy's ``query_parameter_mutations``
re-serialize the whole query from decoded parameters (``%26`` becomes ``&``, a new
parameter), so nothing in the chain uses them (docs/routes.md, "What reaches the upstream").

``header_mutation`` removes client-sent ``x-user-id``, ``x-user-role``, ``x-scope``, ``x-consumer``
and ``x-principal`` (any case, every copy) on every route, public or not, with or without ext_authz. Route-level
header removal would run too late: ext_authz and other filters would already have seen the
forged values.
"""

from __future__ import annotations

from typing import Any

from control_plane.translator.feature import HttpFeature
from control_plane.translator.messages import HEADER_MUTATION_TYPE
from control_plane.translator.settings import GatewaySettings
from servicekit.check_contract import IDENTITY_HEADERS as IDENTITY_HEADERS
from servicekit.check_contract import ROUTE_HEADER as ROUTE_HEADER
from servicekit.check_contract import USER_ID_HEADER as USER_ID_HEADER

CACHE_HEADERS = ("x-gatehouse-cache-control",)
"""What a cached route tells its cluster's upstream filter (``response_cache``); a
client's copy would set an answer's Cache-Control, so it is removed too."""
HEADER_MUTATION_FILTER = "envoy.filters.http.header_mutation"


def identity_header_filter(settings: GatewaySettings | None = None) -> dict[str, Any]:
    names = [*IDENTITY_HEADERS, *CACHE_HEADERS]
    if settings is not None and settings.ext_authz is not None and settings.ext_authz.protocol == "http":
        names.append(ROUTE_HEADER)
    return {
        "name": HEADER_MUTATION_FILTER,
        "typed_config": {
            "@type": HEADER_MUTATION_TYPE,
            "mutations": {
                "request_mutations": [{"remove": name} for name in names],
            },
        },
    }


class IdentityHeaders(HttpFeature):
    name = HEADER_MUTATION_FILTER

    def http_filter(self, settings: GatewaySettings) -> dict[str, Any] | None:
        return identity_header_filter(settings)
