"""A caller's principal: its user id named with the source that vouched for it.

``x-user-id`` is the id as its source knows it (a token's ``sub``, an API key's consumer),
and two sources can both know a ``123``. Everything kept per caller (``user`` rate limits,
``varyByUser`` cache entries, an upstream's own authorization) keys on the principal
instead (``servicekit.check_contract.PRINCIPAL_HEADER``):

- a token: ``jwt;<issuer>;<user id>``, the issuer percent-encoded (RFC 3986), so it holds
  no ``;`` and the first ``;`` after it ends it whatever the user id holds;
- an API key: ``apikey;<consumer>``.

The prefixes differ before the first ``;``, so a token's and a key's principal never meet;
two tokens' meet only when issuer and id both match. The issuer comes from ext_authz's
config and the id has already passed ``claim_headers``' checks, so the value is safe for a
header: the encoded issuer is ASCII without controls.
"""

from __future__ import annotations

from urllib.parse import quote

TOKEN_SOURCE = "jwt"  # noqa: S105 - a principal's source, not a secret
KEY_SOURCE = "apikey"
_SEPARATOR = ";"
_ISSUER_SAFE = ":/@.-_~"
"""Left as they are in an issuer (its URL stays readable); everything else, ``;`` and ``%``
included, is percent-encoded, which is what keeps the encoding one-to-one."""


def token_principal(issuer: str, user_id: str) -> str:
    """The principal of a verified token's user, for the issuer that signed it."""
    return f"{TOKEN_SOURCE}{_SEPARATOR}{quote(issuer, safe=_ISSUER_SAFE)}{_SEPARATOR}{user_id}"


def key_principal(consumer: str) -> str:
    """The principal of an API key's consumer."""
    return f"{KEY_SOURCE}{_SEPARATOR}{consumer}"
