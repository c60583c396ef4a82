"""`gatehouse apikey` when it cannot do what it is asked: each refusal names the input and
the reason, exits 2 and changes nothing (a Redis that refuses connections, a config
without a key store, a bad consumer name or key id, an unprintable reason)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml


def apikey(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gatehouse", "apikey", *args], capture_output=True, text=True, timeout=30)


def test_a_redis_that_refuses_changes_nothing_and_says_so(refused_address: str) -> None:
    url = f"redis://{refused_address}/0"
    for args in (["create", "--consumer", "partner-a"], ["revoke", "--id", "0a1b2c3d"], ["list"]):
        result = apikey(*args, "--redis-url", url, "--timeout", "0.5")
        assert result.returncode == 2, result
        assert f"error: the key store (Redis at {url}) is unavailable" in result.stderr and "nothing was changed" in result.stderr
        assert "ghk_" not in result.stdout, "no key is shown when none was stored"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["create", "--consumer", "Partner A"], "argument --consumer: 'Partner A' is not a consumer name"),
        (["revoke", "--id", "ghk_0a1b2c3d_x"], "argument --id: 'ghk_0a1b2c3d_x' is not a key id (8 hex digits"),
        (["create", "--consumer", "partner-a", "--reason", "bad\x07reason"], "error: reason: at most 256 printable characters"),
    ],
    ids=["consumer", "key-id", "reason"],
)
def test_bad_arguments_are_refused_by_name(args: list[str], message: str, refused_address: str) -> None:
    result = apikey(*args, "--redis-url", f"redis://{refused_address}/0")
    assert result.returncode == 2 and message in result.stderr, result.stderr


def test_a_config_without_a_key_store_is_named(tmp_path: Path) -> None:
    config = tmp_path / "ext-authz.yaml"
    config.write_text(yaml.safe_dump({"issuers": [{"issuer": "https://i.test/", "jwksFile": "jwks.json"}]}))
    result = apikey("list", "--config", str(config))
    assert result.returncode == 2 and f"error: {config}: has no revocation: block (the key store)" in result.stderr
