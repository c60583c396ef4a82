"""What Envoy's access logger sends and telemetry reads beyond Envoy's standard fields.

The control plane lists these headers in the ``http_grpc`` logger's config
(``control_plane/translator/access_log.py``); telemetry reads them from each entry
(``telemetry/access_event.py``). A header missing from the list never reaches telemetry.
Never a credential: the consumer's name is logged (``x-user-id``), never its API key.
"""

from __future__ import annotations

from typing import Final

from servicekit.check_contract import USER_ID_HEADER

LOGGED_REQUEST_HEADERS: Final = (USER_ID_HEADER, "traceparent", "x-b3-traceid")
"""The verified user (set by the check after the client's copy was removed) and the trace
id; x-request-id and user-agent are Envoy's built-in fields."""
LOGGED_RESPONSE_HEADERS: Final = ("x-ratelimit-remaining",)
