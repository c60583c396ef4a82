"""RFC 8693 token exchange: the client's verified token in, the upstream's own token out.

One POST (form-encoded) per miss, with the runtime's aiohttp session (the client the
JWKS fetcher uses) and a deadline on the whole call. The answer must be 200 with JSON
holding a header-safe ``access_token``; ``expires_in`` (seconds) bounds how long it is
reused. Every failure is one ``ExchangeFailed`` with a short reason (``timeout``,
``connection``, ``http_status``, ``bad_answer``): the caller denies with 503. No token,
request or answer body is ever logged or put in an error.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass

import aiohttp

from ext_authz.errors import ExchangeFailed as ExchangeFailed

GRANT_TYPE = "urn:ietf:params:oauth:grant-type:token-exchange"
SUBJECT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt"  # noqa: S105 - a type URN, not a secret
MAX_ANSWER_BYTES = 64 * 1024
MAX_TOKEN_CHARS = 8192
_HEADER_SAFE = re.compile(r"[\x21-\x7e]+")
"""Printable ASCII without spaces: what may follow ``Bearer `` in a header line we write."""


@dataclass(frozen=True, slots=True)
class Exchanged:
    access_token: str
    expires_in: float | None
    """Seconds, as the endpoint said; None if it did not."""


def parse_answer(url: str, status: int, body: bytes) -> Exchanged:
    """The token in an endpoint's answer, or ExchangeFailed naming what was wrong."""
    if status != 200:
        raise ExchangeFailed(url, "http_status", f"answered {status}")
    try:
        data = json.loads(body)
    except ValueError:
        raise ExchangeFailed(url, "bad_answer", "the answer is not JSON") from None
    token = data.get("access_token") if isinstance(data, dict) else None
    if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_CHARS or not _HEADER_SAFE.fullmatch(token):
        raise ExchangeFailed(url, "bad_answer", "no usable access_token (missing, too long, or not header-safe)")
    expires_in = data.get("expires_in")
    if expires_in is not None and (isinstance(expires_in, bool) or not isinstance(expires_in, int | float) or expires_in <= 0):
        raise ExchangeFailed(url, "bad_answer", "expires_in must be a positive number of seconds")
    return Exchanged(token, float(expires_in) if expires_in is not None else None)


class TokenExchange:
    def __init__(self, session: aiohttp.ClientSession, *, timeout: float) -> None:
        self._session = session
        self._timeout = timeout

    async def exchange(self, url: str, subject_token: str, audience: str) -> Exchanged:
        form = {
            "grant_type": GRANT_TYPE,
            "subject_token": subject_token,
            "subject_token_type": SUBJECT_TOKEN_TYPE,
            "audience": audience,
        }
        try:
            async with asyncio.timeout(self._timeout):
                async with self._session.post(
                    url, data=form, allow_redirects=False, headers={"accept": "application/json"},
                    timeout=aiohttp.ClientTimeout(total=self._timeout),
                ) as reply:
                    body = await reply.content.read(MAX_ANSWER_BYTES + 1)
                    status = reply.status
        except TimeoutError:
            raise ExchangeFailed(url, "timeout", f"no answer within {self._timeout:g}s") from None
        except (aiohttp.ClientError, OSError) as exc:
            raise ExchangeFailed(url, "connection", type(exc).__name__) from None
        if len(body) > MAX_ANSWER_BYTES:
            raise ExchangeFailed(url, "bad_answer", f"the answer is larger than {MAX_ANSWER_BYTES} bytes")
        return parse_answer(url, status, body)
