"""CheckResponses Envoy understands: OK with identity headers, or a JSON denial.

Denials follow RFC 6750: 401 with ``WWW-Authenticate: Bearer error="invalid_token"``, 403
with ``error="insufficient_scope"``. The body names an error code, a message and the
request id; it never echoes the token or the claims.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from envoy.config.core.v3 import base_pb2
from envoy.service.auth.v3 import external_auth_pb2
from envoy.type.v3 import http_status_pb2
from google.rpc import code_pb2, status_pb2

from ext_authz.errors import AuthzError

_OVERWRITE = base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
_GRPC_CODE = {401: code_pb2.UNAUTHENTICATED, 403: code_pb2.PERMISSION_DENIED, 503: code_pb2.UNAVAILABLE}


def _header(key: str, value: str) -> base_pb2.HeaderValueOption:
    return base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key=key, value=value), append_action=_OVERWRITE, keep_empty_value=True
    )


def allowed(headers: dict[str, str], remove: Sequence[str] = ()) -> external_auth_pb2.CheckResponse:
    """OK, setting the identity headers and removing mapped ones no claim filled (a
    client's copy of a custom identity header must not pass as ours)."""
    return external_auth_pb2.CheckResponse(
        status=status_pb2.Status(code=code_pb2.OK),
        ok_response=external_auth_pb2.OkHttpResponse(
            headers=[_header(k, v) for k, v in headers.items()], headers_to_remove=list(remove)
        ),
    )


def denial_parts(error: AuthzError, request_id: str) -> tuple[int, list[tuple[str, str]], bytes]:
    """(status, headers, JSON body) of a denial: the same on the gRPC and HTTP transports."""
    body = json.dumps(
        {"error": {"code": error.error, "reason": error.reason, "message": error.message, "request_id": request_id}},
        separators=(",", ":"),
    ).encode()
    headers = [("content-type", "application/json"), ("cache-control", "no-store")]
    if error.status in (401, 403):
        description = error.message.replace("\\", "").replace('"', "'")
        headers.append(("www-authenticate", f'Bearer realm="gatehouse", error="{error.error}", error_description="{description}"'))
    if error.status == 503:
        headers.append(("retry-after", "1"))
    return error.status, headers, body


def denied(error: AuthzError, request_id: str) -> external_auth_pb2.CheckResponse:
    status, headers, body = denial_parts(error, request_id)
    return external_auth_pb2.CheckResponse(
        status=status_pb2.Status(code=_GRPC_CODE.get(status, code_pb2.PERMISSION_DENIED)),
        denied_response=external_auth_pb2.DeniedHttpResponse(
            status=http_status_pb2.HttpStatus(code=status), headers=[_header(k, v) for k, v in headers], body=body
        ),
    )
