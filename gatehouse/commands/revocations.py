"""`gatehouse revoke|block|unblock|revocations`: the revocation admin API from a shell.

    gatehouse revoke --jti ID (--expires-at UNIX | --ttl 1h) [--reason TEXT]
    gatehouse block --sub SUBJECT [--ttl 7d | --until UNIX] [--reason TEXT]   (no expiry: permanent)
    gatehouse unblock --sub SUBJECT [--reason TEXT]
    gatehouse revocations [--kind jti|sub] [--limit N] [--json]

Every command takes ``--admin HOST:PORT`` (default 127.0.0.1:9192, or $GATEHOUSE_ADMIN),
``--credential-file PATH`` (else the credential itself in $GATEHOUSE_ADMIN_CREDENTIAL) and
``--timeout SECONDS`` (default 5) for the call. Exit status: 0 done, 2 refused or failed.
"""

from __future__ import annotations

import argparse
import datetime
import getpass
import json
import math
import os
import re
import socket
import sys
import time
from gatehouse.commands.errors import CommandError
from pathlib import Path
from typing import Any

import grpc

from servicekit.protos.gatehouse.admin.v1 import revocation_pb2 as pb
from servicekit.protos.gatehouse.admin.v1 import revocation_pb2_grpc

# ext_authz.admin.service (and with it redis and the mirror) is imported only when one of these
# commands runs, so that every other `gatehouse` command starts as fast as before.

CREDENTIAL_ENV = "GATEHOUSE_ADMIN_CREDENTIAL"
ADMIN_ENV = "GATEHOUSE_ADMIN"
DEFAULT_ADMIN = "127.0.0.1:9192"
_TTL_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
_TTL = re.compile(r"^(?:[0-9]+[smhd])+$")
_MAX_TTL = 365 * 86_400


def parse_ttl(text: str) -> int:
    """``90s``, ``15m``, ``1h``, ``7d``, ``1d12h`` → seconds (at most a year)."""
    if len(text) > 32 or not _TTL.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration; use forms like 90s, 15m, 1h, 7d, 1d12h")
    seconds = sum(int(number) * _TTL_UNITS[unit] for number, unit in re.findall(r"([0-9]+)([smhd])", text))
    if not 0 < seconds <= _MAX_TTL:
        raise argparse.ArgumentTypeError(f"{text!r} must be longer than 0s and at most 365d")
    return seconds


def _unix_time(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a Unix time in seconds") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a Unix time in seconds")
    return value


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--admin", default=os.environ.get(ADMIN_ENV, DEFAULT_ADMIN), metavar="HOST:PORT", help="ext_authz admin API"
    )
    common.add_argument(
        "--credential-file", type=Path, metavar="PATH", help=f"admin credential file (else ${CREDENTIAL_ENV})"
    )
    common.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS", help="deadline for the call")
    changes = argparse.ArgumentParser(add_help=False, parents=[common])
    changes.add_argument("--reason", default="", help="recorded in the audit trail")

    revoke = subparsers.add_parser("revoke", parents=[changes], help="revoke a token by its jti until it expires")
    revoke.add_argument("--jti", required=True, help="the token's jti claim")
    when = revoke.add_mutually_exclusive_group(required=True)
    when.add_argument("--expires-at", type=_unix_time, metavar="UNIX", help="the token's exp claim")
    when.add_argument("--ttl", type=parse_ttl, metavar="DURATION", help="the token expires this long from now")
    revoke.set_defaults(run=run_revoke)

    block = subparsers.add_parser("block", parents=[changes], help="block a subject (every token of it)")
    block.add_argument("--sub", required=True, help="the subject (sub claim)")
    until = block.add_mutually_exclusive_group()
    until.add_argument("--ttl", type=parse_ttl, metavar="DURATION", help="for this long (default: until unblocked)")
    until.add_argument("--until", type=_unix_time, metavar="UNIX", help="until this Unix time")
    block.set_defaults(run=run_block)

    unblock = subparsers.add_parser("unblock", parents=[changes], help="lift a subject's block")
    unblock.add_argument("--sub", required=True, help="the subject (sub claim)")
    unblock.set_defaults(run=run_unblock)

    listing = subparsers.add_parser("revocations", parents=[common], help="list revoked jtis and blocked subjects")
    listing.add_argument("--kind", choices=["jti", "sub"], help="only revoked jtis or only blocked subjects")
    listing.add_argument("--limit", type=int, default=1000, help="at most this many entries (server cap: 10000)")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(run=run_list)


def credential_for(args: argparse.Namespace) -> str:
    from ext_authz.admin.service import check_credential, read_credential

    if args.credential_file is not None:
        return read_credential(args.credential_file)
    value = os.environ.get(CREDENTIAL_ENV)
    if value:
        return check_credential(value.strip(), f"${CREDENTIAL_ENV}")
    raise CommandError(f"no admin credential: pass --credential-file PATH or set ${CREDENTIAL_ENV}")


def _operator() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"[:64]


def _call(args: argparse.Namespace, method: str, request: Any) -> Any:
    """One unary call with the credential and a deadline; gRPC errors → CommandError."""
    from ext_authz.admin.service import OPERATOR_HEADER

    metadata = (("authorization", f"Bearer {credential_for(args)}"), (OPERATOR_HEADER, _operator()))
    with grpc.insecure_channel(args.admin) as channel:
        stub = revocation_pb2_grpc.RevocationAdminStub(channel)  # type: ignore[no-untyped-call]
        try:
            return getattr(stub, method)(request, metadata=metadata, timeout=args.timeout)
        except grpc.RpcError as exc:
            raise CommandError(_describe(exc, args)) from None


def _describe(exc: Any, args: argparse.Namespace) -> str:
    code, details = exc.code(), exc.details() or ""
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return f"the admin API at {args.admin} refused the credential"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"no answer from the admin API at {args.admin} within {args.timeout:g}s"
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return f"refused: {details}"
    if code == grpc.StatusCode.UNAVAILABLE and "revocation store" in details:
        return f"{details}; nothing was changed, try again"
    if code == grpc.StatusCode.UNAVAILABLE:
        return f"cannot reach the admin API at {args.admin}: {details}"
    return f"{code.name}: {details}"


def _run(args: argparse.Namespace, body: Any) -> int:
    from ext_authz.admin.service import CredentialError

    try:
        body(args)
    except (CommandError, CredentialError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def run_revoke(args: argparse.Namespace) -> int:
    def body(args: argparse.Namespace) -> None:
        expires_at = args.expires_at if args.expires_at is not None else math.ceil(time.time()) + args.ttl
        request = pb.RevokeRequest(jti=args.jti, expires_at=expires_at, reason=args.reason)
        response = _call(args, "Revoke", request)
        print(f"revoked jti {_shown(response.entry.value)} until {_when(response.entry.expires_at)}")

    return _run(args, body)


def run_block(args: argparse.Namespace) -> int:
    def body(args: argparse.Namespace) -> None:
        until = args.until if args.until is not None else (math.ceil(time.time()) + args.ttl if args.ttl else None)
        request = pb.BlockRequest(subject=args.sub, reason=args.reason)
        if until is not None:
            request.until = until
        response = _call(args, "Block", request)
        entry = response.entry
        ending = f"until {_when(entry.expires_at)}" if entry.HasField("expires_at") else "until unblocked"
        print(f"blocked sub {_shown(entry.value)} {ending}")

    return _run(args, body)


def run_unblock(args: argparse.Namespace) -> int:
    def body(args: argparse.Namespace) -> None:
        response = _call(args, "Unblock", pb.UnblockRequest(subject=args.sub, reason=args.reason))
        print(f"unblocked sub {_shown(args.sub)}" if response.existed else f"sub {_shown(args.sub)} was not blocked")

    return _run(args, body)


def run_list(args: argparse.Namespace) -> int:
    def body(args: argparse.Namespace) -> None:
        kinds = {"jti": pb.ENTRY_KIND_REVOKED_JTI, "sub": pb.ENTRY_KIND_BLOCKED_SUBJECT}
        kind = kinds.get(args.kind or "", pb.ENTRY_KIND_UNSPECIFIED)
        response = _call(args, "List", pb.ListRequest(kind=kind, limit=max(0, args.limit)))
        entries = [
            {
                "kind": "jti" if e.kind == pb.ENTRY_KIND_REVOKED_JTI else "sub",
                "value": e.value,
                "expires_at": e.expires_at if e.HasField("expires_at") else None,
            }
            for e in response.entries
        ]
        mirror = response.mirror
        if args.json:
            status = {"state": mirror.state, "synced_at": mirror.synced_at or None, "policy": mirror.policy}
            document = {"entries": entries, "truncated": response.truncated, "mirror": status}
            json.dump(document, sys.stdout, indent=2)
            print()
            return
        synced = _when(int(mirror.synced_at)) if mirror.synced_at else "never"
        print(f"mirror: {mirror.state} (last in sync {synced}), policy {mirror.policy}")
        print(f"{'KIND':5} {'EXPIRES':25} VALUE")
        for entry in entries:
            expires = entry["expires_at"]
            shown_expiry = _when(expires) if isinstance(expires, int) else "never"
            print(f"{entry['kind']:5} {shown_expiry:25} {_shown(str(entry['value']))}")
        if response.truncated:
            print(f"(more than {len(entries)} entries; raise --limit to see more)")

    return _run(args, body)


def _when(unix: int) -> str:
    return datetime.datetime.fromtimestamp(unix, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _shown(value: str) -> str:
    """Safe for a terminal: non-printable characters escaped."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in value)
