"""`gatehouse revoke|block|unblock|revocations`: argument parsing and credential lookup."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from ext_authz.admin.service import CredentialError
from gatehouse.cli import build_parser
from gatehouse.commands.revocations import CommandError, credential_for, parse_ttl

GOOD = "0123456789abcdef-credential"


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("15m", 900), ("1h", 3600), ("7d", 604800), ("1d12h", 129600), ("365d", 31536000)])
def test_ttl(text: str, seconds: int) -> None:
    assert parse_ttl(text) == seconds


@pytest.mark.parametrize("text", ["", "1", "1w", "-1h", "0s", "366d", "1.5h", "h"])
def test_bad_ttl(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_ttl(text)


def test_commands_are_registered() -> None:
    parser = build_parser()
    args = parser.parse_args(["revoke", "--jti", "j1", "--ttl", "1h"])
    assert (args.jti, args.ttl, args.expires_at, args.admin) == ("j1", 3600, None, "127.0.0.1:9192")
    args = parser.parse_args(["block", "--sub", "alice", "--until", "1900000000", "--reason", "fraud"])
    assert (args.sub, args.until, args.ttl, args.reason) == ("alice", 1900000000, None, "fraud")
    args = parser.parse_args(["unblock", "--sub", "alice", "--admin", "10.0.0.1:9192", "--timeout", "2"])
    assert (args.admin, args.timeout) == ("10.0.0.1:9192", 2.0)
    args = parser.parse_args(["revocations", "--kind", "jti", "--json"])
    assert (args.kind, args.json) == ("jti", True)


@pytest.mark.parametrize(
    "argv",
    [
        ["revoke", "--jti", "j1"],  # no expiry
        ["revoke", "--jti", "j1", "--ttl", "1h", "--expires-at", "1900000000"],
        ["revoke", "--ttl", "1h"],
        ["revoke", "--jti", "j1", "--expires-at", "soon"],
        ["block", "--sub", "a", "--ttl", "1h", "--until", "1900000000"],
        ["unblock"],
    ],
)
def test_bad_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2


def test_credential_from_file_then_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GATEHOUSE_ADMIN_CREDENTIAL", raising=False)
    ns = argparse.Namespace(credential_file=None)
    with pytest.raises(CommandError, match="--credential-file"):
        credential_for(ns)
    monkeypatch.setenv("GATEHOUSE_ADMIN_CREDENTIAL", GOOD)
    assert credential_for(ns) == GOOD
    path = tmp_path / "cred"
    path.write_text("  other-credential-0123456789\n")
    assert credential_for(argparse.Namespace(credential_file=path)) == "other-credential-0123456789"
    path.write_text("short")
    with pytest.raises(CredentialError, match="at least 16"):
        credential_for(argparse.Namespace(credential_file=path))
    with pytest.raises(CredentialError, match="cannot read"):
        credential_for(argparse.Namespace(credential_file=tmp_path / "missing"))
