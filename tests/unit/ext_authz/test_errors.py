"""The exception tree errors.py draws is the one the code has, and error_mapping.py turns
lower-level errors into the most specific public class, with the message operators see."""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ext_authz import errors
from ext_authz.error_mapping import credential_file_errors, file_jwks_errors, http_jwks_errors, redis_errors
from ext_authz.errors import CredentialError, ExtAuthzError, JwksFetchError, StoreUnavailable

_NODE = re.compile(r"^(?P<indent>[ │]*)(?:[├└]── )?(?P<name>[A-Z]\w+)\b")


def drawn_tree(docstring: str) -> dict[str, str | None]:
    """class name → the parent the drawing gives it (None for the root)."""
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for line in docstring.splitlines():
        match = _NODE.match(line.removeprefix("    "))
        if match is None or not line.startswith("    "):
            continue
        depth = len(match.group("indent"))
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[match.group("name")] = stack[-1][1] if stack else None
        stack.append((depth, match.group("name")))
    return parents


def test_the_drawing_is_the_hierarchy() -> None:
    assert errors.__doc__ is not None
    drawn = drawn_tree(errors.__doc__)
    defined = {
        name: cls for name, cls in vars(errors).items() if isinstance(cls, type) and issubclass(cls, BaseException)
    }
    assert set(drawn) == set(defined), "every class is drawn, and nothing else"
    for name, parent in drawn.items():
        own = [base for base in defined[name].__bases__ if base.__module__ == errors.__name__]
        assert [b.__name__ for b in own] == ([parent] if parent else []), name


def test_admin_input_errors_are_still_value_errors() -> None:
    assert issubclass(errors.InvalidEntry, ValueError) and issubclass(errors.CredentialError, ValueError)


@pytest.mark.parametrize(
    ("raised", "reason", "message"),
    [
        (RedisTimeoutError("Timeout reading from socket"), "timeout", "scan failed: TimeoutError: Timeout reading from socket"),
        (TimeoutError(), "timeout", "scan failed: timed out"),
        (RedisConnectionError("Connection reset by peer"), "connection", "scan failed: ConnectionError: Connection reset by peer"),
        (ConnectionResetError(104, "reset"), "connection", "scan failed: ConnectionResetError: [Errno 104] reset"),
        (ResponseError("WRONGTYPE"), "redis_error", "scan failed: ResponseError: WRONGTYPE"),
    ],
)
def test_redis_errors_become_store_unavailable(raised: Exception, reason: str, message: str) -> None:
    with pytest.raises(StoreUnavailable) as caught, redis_errors("scan", "scan failed"):
        raise raised
    assert (str(caught.value), caught.value.operation, caught.value.reason) == (message, "scan", reason)
    assert caught.value.transient and caught.value.__cause__ is raised


def test_other_errors_pass_through_unmapped() -> None:
    with pytest.raises(KeyError), redis_errors("scan", "scan failed"):
        raise KeyError("a bug, not an outage")
    already = JwksFetchError("HTTP 500", source="https://idp/jwks", reason="http_status")
    with pytest.raises(JwksFetchError) as caught, http_jwks_errors("https://idp/jwks", 2.0):
        raise already
    assert caught.value is already


@pytest.mark.parametrize(
    ("raised", "reason", "message"),
    [
        (aiohttp.ServerTimeoutError("read timeout"), "timeout", "timed out after 2.0s"),  # a ClientError and a TimeoutError
        (aiohttp.ServerDisconnectedError(), "connection", "ServerDisconnectedError"),
        (aiohttp.ClientPayloadError("truncated"), "http_error", "ClientPayloadError"),
        (ValueError("Expecting value"), "not_json", "response is not JSON"),
        (RecursionError(), "not_json", "response is not JSON"),
    ],
)
def test_http_fetch_errors_become_jwks_fetch_errors(raised: BaseException, reason: str, message: str) -> None:
    with pytest.raises(JwksFetchError) as caught, http_jwks_errors("https://idp/jwks", 2.0):
        raise raised
    assert (str(caught.value), caught.value.source, caught.value.reason) == (message, "https://idp/jwks", reason)


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    with pytest.raises(JwksFetchError) as caught, file_jwks_errors(path):
        path.read_bytes()
    assert (str(caught.value), caught.value.source, caught.value.reason) == (
        f"cannot read {path}: No such file or directory", str(path), "unreadable"
    )
    with pytest.raises(JwksFetchError, match="is not JSON") as caught, file_jwks_errors(path):
        raise ValueError("Expecting value")
    assert caught.value.reason == "not_json"


def test_an_unreadable_credential_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "credential"
    path.write_bytes(b"\xff" * 20)
    with pytest.raises(CredentialError) as caught, credential_file_errors(path):
        path.read_text(encoding="utf-8")
    assert caught.value.origin == str(path) and str(caught.value).startswith(f"{path}: cannot read the admin credential: ")
    assert isinstance(caught.value, ExtAuthzError)
