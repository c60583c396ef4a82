"""`gatehouse apikey create|revoke|list`: consumers' API keys, in the revocation store (Redis).

    gatehouse apikey create --consumer partner-a [--reason TEXT]   the key, once, on stdout
    gatehouse apikey create --consumer partner-a --secret FILE      a Kubernetes Secret (hash only) instead
    gatehouse apikey revoke --id KEY_ID [--reason TEXT]             refused everywhere within 1 s
    gatehouse apikey list [--consumer NAME] [--json]                consumer, key id, created; never a key

Every command talks to the Redis the ext_authz instances mirror (their ``revocation:``
block): ``--config ext-authz.yaml`` reads ``redisUrl`` and ``keyPrefix`` from it, else
``--redis-url`` (default $GATEHOUSE_REDIS_URL or redis://127.0.0.1:6379/0) and
``--key-prefix`` (default ``gatehouse:``); ``--timeout SECONDS`` bounds each Redis call
(default 2). Only the key's sha256 is written; a write and its pub/sub message are one
transaction, so every instance's mirror has it within milliseconds. Each create and
revoke is an audit event (``apikey.created``/``apikey.revoked``: operator, consumer, key
id, never the key), one JSON line on stderr. Exit status: 0 done, 2 refused or failed.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import re
import sys
import time
from gatehouse.commands.errors import CommandError
from pathlib import Path
from typing import Any

from gatehouse.commands.revocations import _operator
from servicekit.audit import APIKEY_CREATED, APIKEY_REVOKED

REDIS_ENV = "GATEHOUSE_REDIS_URL"
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"
_CONSUMER = re.compile(r"[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?")
_KEY_ID = re.compile(r"[0-9a-f]{8}")


def _consumer(text: str) -> str:
    if not _CONSUMER.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a consumer name: 1-63 of a-z 0-9 . _ -, starting and ending with a letter or digit"
        )
    return text


def _key_id(text: str) -> str:
    if not _KEY_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a key id (8 hex digits, as `gatehouse apikey list` shows)")
    return text


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", type=Path, metavar="PATH", help="an ext_authz config: its revocation: Redis")
    common.add_argument("--redis-url", default=os.environ.get(REDIS_ENV, DEFAULT_REDIS), help=f"default ${REDIS_ENV}")
    common.add_argument("--key-prefix", default="gatehouse:", help="revocation.keyPrefix of ext_authz")
    common.add_argument("--timeout", type=float, default=2.0, metavar="SECONDS", help="deadline per Redis call")
    changes = argparse.ArgumentParser(add_help=False, parents=[common])
    changes.add_argument("--reason", default="", help="recorded in the audit event")

    parser = subparsers.add_parser("apikey", help="create, revoke and list consumers' API keys")
    commands = parser.add_subparsers(dest="apikey_command", required=True, metavar="COMMAND")
    create = commands.add_parser("create", parents=[changes], help="a new key for a consumer, printed once")
    create.add_argument("--consumer", type=_consumer, required=True)
    create.add_argument(
        "--secret", type=Path, metavar="FILE",
        help="write a Kubernetes Secret holding the key's hash to FILE (kubectl apply it) instead of Redis",
    )
    create.add_argument("--namespace", help="the Secret's namespace (with --secret; default: kubectl's)")
    create.set_defaults(run=run_create)
    revoke = commands.add_parser("revoke", parents=[changes], help="revoke a key by its id")
    revoke.add_argument("--id", type=_key_id, required=True, dest="key_id", help="the key id (`apikey list`)")
    revoke.set_defaults(run=run_revoke)
    listing = commands.add_parser("list", parents=[common], help="consumers, key ids and when created; never a key")
    listing.add_argument("--consumer", type=_consumer, help="only this consumer's keys")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(run=run_list)


def _store(args: argparse.Namespace) -> tuple[Any, Any]:
    """(the key writer, its Redis client)."""
    from ext_authz.admin.inputs import validate_reason
    from ext_authz.config import load_ext_authz_config
    from servicekit.api_key_store import redis_api_keys

    try:
        validate_reason(getattr(args, "reason", ""))
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    url, prefix = args.redis_url, args.key_prefix
    if args.config is not None:
        try:
            config = load_ext_authz_config(args.config)
        except (OSError, ValueError) as exc:
            raise CommandError(f"{args.config}: {exc}") from None
        if config.revocation is None:
            raise CommandError(f"{args.config}: has no revocation: block (the key store)")
        url, prefix = config.revocation.redis_url, config.revocation.key_prefix
    return redis_api_keys(url, prefix=prefix, timeout=args.timeout)


def _audit(kind: str, args: argparse.Namespace, consumer: str, key_id: str) -> None:
    from servicekit.audit import AuditEvent

    event = AuditEvent(
        kind=kind, actor="cli", subject=consumer, reason=args.reason,
        details={"key_id": key_id, "operator": _operator()},
    )
    print(json.dumps({"event": "audit", **event.as_dict()}), file=sys.stderr)


def _run(args: argparse.Namespace, body: Any) -> int:
    from servicekit.api_key_store import KeyStoreUnavailable

    async def main() -> None:
        store, client = _store(args)
        try:
            await body(store)
        finally:
            await client.aclose()

    try:
        asyncio.run(main())
    except KeyStoreUnavailable as exc:
        print(f"error: the key store (Redis at {_where(args)}) is unavailable: {exc}; nothing was changed", file=sys.stderr)
        return 2
    except CommandError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _where(args: argparse.Namespace) -> str:
    """The Redis address without credentials."""
    return str(args.config) if args.config is not None else re.sub(r"//[^@/]*@", "//", args.redis_url)


def run_create(args: argparse.Namespace) -> int:
    from ext_authz.check.api_keys import key_hash, new_key
    from servicekit.api_key_store import ApiKey

    if args.secret is not None:
        key_id, key = new_key()
        try:
            args.secret.write_text(secret_manifest(args.consumer, key_id, key_hash(key).hex(), args.namespace))
        except OSError as exc:
            print(f"error: cannot write {args.secret}: {exc.strerror}", file=sys.stderr)
            return 2
        _audit(APIKEY_CREATED, args, args.consumer, key_id)
        print(f"wrote Secret for key {key_id} of consumer {args.consumer} to {args.secret}; the key is shown once:", file=sys.stderr)
        print(key)
        return 0

    async def body(store: Any) -> None:
        key_id, key = new_key()
        await store.add_key(ApiKey(key_id, args.consumer, key_hash(key), float(int(time.time()))))
        _audit(APIKEY_CREATED, args, args.consumer, key_id)
        print(f"created key {key_id} for consumer {args.consumer}; it is shown once, store it now:", file=sys.stderr)
        print(key)

    return _run(args, body)


def run_revoke(args: argparse.Namespace) -> int:
    async def body(store: Any) -> None:
        removed = await store.remove_key(args.key_id)
        if removed is None:
            raise CommandError(f"no key with id {args.key_id}")
        _audit(APIKEY_REVOKED, args, removed.consumer, args.key_id)
        print(f"revoked key {args.key_id} of consumer {removed.consumer}")

    return _run(args, body)


def run_list(args: argparse.Namespace) -> int:
    async def body(store: Any) -> None:
        keys = sorted(await store.scan_keys(), key=lambda k: (k.consumer, k.created, k.key_id))
        if args.consumer:
            keys = [k for k in keys if k.consumer == args.consumer]
        rows = [{"consumer": k.consumer, "key_id": k.key_id, "created": _when(k.created)} for k in keys]
        if args.json:
            json.dump(rows, sys.stdout, indent=2)
            print()
            return
        print(f"{'CONSUMER':32} {'KEY ID':9} CREATED")
        for row in rows:
            print(f"{row['consumer']:32} {row['key_id']:9} {row['created']}")

    return _run(args, body)


def secret_manifest(consumer: str, key_id: str, digest: str, namespace: str | None) -> str:
    """The Secret the control plane syncs (control_plane/sources/kubernetes/api_key_secrets.py)."""
    metadata: dict[str, Any] = {"name": f"apikey-{consumer}-{key_id}"[:253], "labels": {"gatehouse.io/api-key": "true"}}
    if namespace:
        metadata["namespace"] = namespace
    document = {
        "apiVersion": "v1", "kind": "Secret", "type": "gatehouse.io/api-key", "metadata": metadata,
        "stringData": {"consumer": consumer, "keyId": key_id, "sha256": digest},
    }
    return json.dumps(document, indent=2) + "\n"


def _when(unix: float) -> str:
    return datetime.datetime.fromtimestamp(unix, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
