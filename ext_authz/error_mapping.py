"""Where lower-level errors become the public tree (``errors.py``): here, and nowhere else.

    redis RedisError, OSError, TimeoutError             → StoreUnavailable   redis_errors()
    TimeoutError, aiohttp.ClientError, a body not JSON  → JwksFetchError     http_jwks_errors()
    OSError, a file not JSON                            → JwksFetchError     file_jwks_errors()
    OSError, UnicodeDecodeError (credential file)       → CredentialError    credential_file_errors()
    PyJWT / cryptography verifying a signature          → TokenError ``bad_signature``  SIGNATURE_ERRORS
    PyJWT / cryptography loading one JWK                → that key is skipped           JWK_ERRORS

Each context manager raises the public error with the message operators (and the admin
CLI) already see, plus what failed (``operation``, ``source``, ``origin``) and a short
``reason`` code. The PyJWT tuples are caught where the key or signature is at hand
(``tokens._check_signature``, ``jwks.key_from_jwk``), since no I/O is involved there.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import aiohttp
import jwt
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ext_authz.errors import CredentialError, JwksFetchError, StoreUnavailable

REDIS_ERRORS: Final = (RedisError, OSError, TimeoutError)
"""What a Redis call may raise when the store cannot answer now (TimeoutError: ``asyncio.timeout``)."""

SIGNATURE_ERRORS: Final = (NotImplementedError, ValueError, TypeError, jwt.PyJWTError)
"""What checking a signature with a loaded key may raise: the key cannot verify this token."""

JWK_ERRORS: Final = (jwt.PyJWTError, ValueError, TypeError)
"""What building a key from one JWK may raise: not a key we can use."""


def describe(exc: BaseException) -> str:
    """``Type: message`` of a lower-level error, at most 300 characters."""
    if isinstance(exc, TimeoutError) and not str(exc):
        return "timed out"
    return f"{type(exc).__name__}: {exc}"[:300]


def _redis_reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError | RedisTimeoutError):
        return "timeout"
    if isinstance(exc, OSError | RedisConnectionError):
        return "connection"
    return "redis_error"


@contextmanager
def redis_errors(operation: str, failed: str) -> Iterator[None]:
    """A Redis failure inside becomes ``StoreUnavailable("<failed>: <what happened>")``."""
    try:
        yield
    except REDIS_ERRORS as exc:
        raise StoreUnavailable(f"{failed}: {describe(exc)}", operation=operation, reason=_redis_reason(exc)) from exc


@contextmanager
def http_jwks_errors(url: str, timeout: float) -> Iterator[None]:
    """A failed HTTP fetch of ``url`` becomes a JwksFetchError (never with the body)."""
    try:
        yield
    except TimeoutError:
        raise JwksFetchError(f"timed out after {timeout}s", source=url, reason="timeout") from None
    except aiohttp.ClientError as exc:
        reason = "connection" if isinstance(exc, aiohttp.ClientConnectionError) else "http_error"
        raise JwksFetchError(type(exc).__name__, source=url, reason=reason) from None
    except (ValueError, RecursionError):
        raise JwksFetchError("response is not JSON", source=url, reason="not_json") from None


@contextmanager
def file_jwks_errors(path: Path) -> Iterator[None]:
    """A failed read of the JWKS file ``path`` becomes a JwksFetchError."""
    try:
        yield
    except OSError as exc:
        raise JwksFetchError(f"cannot read {path}: {exc.strerror}", source=str(path), reason="unreadable") from None
    except (ValueError, RecursionError):
        raise JwksFetchError(f"{path} is not JSON", source=str(path), reason="not_json") from None


@contextmanager
def credential_file_errors(path: Path) -> Iterator[None]:
    """A failed read of the admin credential file ``path`` becomes a CredentialError."""
    try:
        yield
    except (OSError, UnicodeDecodeError) as exc:
        raise CredentialError(str(path), f"cannot read the admin credential: {exc}") from None
