"""Keep credentials in a Git source's URL out of everything the control plane shows.

An HTTPS URL may carry a token (``https://user:TOKEN@host/repo.git``,
``https://TOKEN@host/...``, ``?access_token=TOKEN``). /status, the status page and
``gatehouse status`` are read with the read credential, logs go to whoever reads logs,
and git's own errors may echo the URL: each of them gets the redacted form. What git
itself is given stays the URL as configured.

Two layers, because git may print the URL transformed (percent-decoded, a path appended):
URL-shaped text loses its userinfo and the values of known token parameters wherever it
appears, and the configured URL's own secrets are replaced as literal strings too.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

MASK = "***"

TOKEN_PARAMETERS = (
    "access_token",
    "private_token",
    "oauth_token",
    "token",
    "auth",
    "password",
    "passwd",
    "secret",
    "api_key",
    "apikey",
    "key",
    "sig",
    "signature",
    "x-amz-signature",
    "x-amz-credential",
    "x-amz-security-token",
)
"""Query parameters whose values are credentials at common Git hosts and object stores."""

_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/?#\s]*)@")
_PARAMETER = re.compile(
    r"(?P<name>[?&;](?:" + "|".join(re.escape(p) for p in TOKEN_PARAMETERS) + r")=)(?P<value>[^&#;\s'\"]*)",
    re.IGNORECASE,
)
_MIN_LITERAL = 4
"""Shorter secrets are not replaced as literal text (it would mangle every message); the
URL-shaped layer still removes them where they appear in a URL."""


def redact_url(url: str) -> str:
    """The URL (or any text) with userinfo and token parameter values masked."""
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", url)
    return _PARAMETER.sub(lambda m: f"{m['name']}{MASK}" if m["value"] else m[0], text)


def url_secrets(url: str) -> tuple[str, ...]:
    """The credentials in ``url``, as written and percent-decoded, longest first: the
    password (or the whole userinfo when it has no password, a token as user name) and
    the values of token parameters."""
    found: set[str] = set()
    for match in _USERINFO.finditer(url):
        userinfo = match["userinfo"]
        _user, colon, password = userinfo.partition(":")
        found.add(password if colon else userinfo)
    found.update(match["value"] for match in _PARAMETER.finditer(url))
    decoded = {unquote(secret) for secret in found}
    return tuple(sorted((s for s in found | decoded if len(s) >= _MIN_LITERAL), key=len, reverse=True))


def redact_text(text: str, url: str) -> str:
    """``text`` (a git error, a log line) with every form of ``url``'s secrets masked."""
    redacted = redact_url(text)
    secrets = url_secrets(url)
    # Until none is left: a replacement can join text into a secret again, but every pass
    # shortens the text (a secret is longer than the mask), so this ends.
    while any(secret in redacted for secret in secrets):
        for secret in secrets:
            redacted = redacted.replace(secret, MASK)
    return redacted
