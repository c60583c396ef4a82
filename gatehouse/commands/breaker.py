"""`gatehouse breaker status|open|close|half-open|release`: the route breakers from a shell.

    gatehouse breaker status [NAMESPACE/NAME] [--json]
    gatehouse breaker open NAMESPACE/NAME [--for 10m] [--reason TEXT]   (without --for: pinned until close/release)
    gatehouse breaker close NAMESPACE/NAME [--reason TEXT]             (pinned until release)
    gatehouse breaker half-open NAMESPACE/NAME [--reason TEXT]         (fresh probes decide)
    gatehouse breaker release NAMESPACE/NAME [--reason TEXT]           (back to the detector)

Every command takes ``--admin URL`` (the control plane's admin address, default
http://127.0.0.1:19000 or $GATEHOUSE_CONTROL_PLANE) and ``--timeout SECONDS`` (default 5);
the moves take ``--credential-file PATH`` (the control plane's
``breakers.operatorCredentialFile``; else the credential itself in
$GATEHOUSE_BREAKER_CREDENTIAL) and send ``user@host`` as the operator for the audit trail;
``status`` takes ``--credential-file PATH`` too, the admin port's read credential, where
reads need one (``admin_credential``).
Exit status: 0 done (status: every breaker CLOSED), 1 (status only) some breaker is OPEN
or HALF_OPEN, 2 refused or failed.
"""

from __future__ import annotations

import argparse
import datetime
import getpass
import json
import os
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from gatehouse.commands.errors import CommandError
from pathlib import Path
from typing import Any

from gatehouse.commands import admin_credential
from servicekit.bearer import BearerCredentialError, read_bearer_credential

ADMIN_ENV = "GATEHOUSE_CONTROL_PLANE"
CREDENTIAL_ENV = "GATEHOUSE_BREAKER_CREDENTIAL"
DEFAULT_ADMIN = "http://127.0.0.1:19000"
ACTIONS = ("open", "close", "half-open", "release")


def _route(text: str) -> str:
    namespace, _, name = text.partition("/")
    if not namespace or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"{text!r} is not a route id; use NAMESPACE/NAME (as gatehouse breaker status shows)")
    return text


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--admin", default=os.environ.get(ADMIN_ENV, DEFAULT_ADMIN), metavar="URL", help="control plane admin URL")
    common.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS", help="deadline for the call")
    parser = subparsers.add_parser("breaker", help="show, open, close or release route circuit breakers")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    status = actions.add_parser("status", parents=[common], help="every route breaker: phase, who moved it, its counts")
    status.add_argument("route", nargs="?", type=_route, metavar="NAMESPACE/NAME", help="only this route")
    status.add_argument("--json", action="store_true", help="print the raw document")
    admin_credential.add_argument(status)
    status.set_defaults(run=run_status)
    helps = {
        "open": "open the breaker: the route answers its fallback (pinned until close/release, or --for a while)",
        "close": "close the breaker and pin it closed until release",
        "half-open": "half-open the breaker now: its probes decide",
        "release": "unpin the breaker and hand it back to the detector",
    }
    for action in ACTIONS:
        move = actions.add_parser(action, parents=[common], help=helps[action])
        move.add_argument("route", type=_route, metavar="NAMESPACE/NAME")
        move.add_argument("--credential-file", type=Path, metavar="PATH", help=f"operator credential file (else ${CREDENTIAL_ENV})")
        move.add_argument("--reason", default="", help="recorded in the audit trail and shown as the breaker's reason")
        move.add_argument("--json", action="store_true", help="print the answer as JSON")
        if action == "open":
            move.add_argument("--for", dest="open_for", metavar="DURATION", help="open this long (10m, 1h), then probe; default: pinned")
        move.set_defaults(run=run_move)


def _credential(args: argparse.Namespace) -> str:
    if args.credential_file is not None:
        return read_bearer_credential(args.credential_file)
    value = os.environ.get(CREDENTIAL_ENV, "").strip()
    if not value:
        raise CommandError(f"no operator credential: pass --credential-file PATH or set ${CREDENTIAL_ENV}")
    return value


def _operator() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return "".join(c for c in f"{user}@{socket.gethostname()}" if c.isprintable())[:64]


def _call(args: argparse.Namespace, path: str, *, data: bytes | None = None, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """One request; every failure becomes a CommandError that says what to do."""
    url = args.admin.rstrip("/") + path
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise CommandError(f"--admin {args.admin!r}: must be an http:// or https:// URL")
    method = "POST" if data is not None else "GET"
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})  # noqa: S310 - http(s) only
    try:
        with urllib.request.urlopen(request, timeout=args.timeout) as response:  # noqa: S310 - an operator's own URL
            document: dict[str, Any] = json.load(response)
            return document
    except urllib.error.HTTPError as exc:
        try:
            detail = str(json.load(exc).get("error", ""))
        except (ValueError, AttributeError):
            detail = ""
        if exc.code == 401:
            refused = "refused the operator credential" if method == "POST" else admin_credential.REFUSED
            raise CommandError(f"the control plane at {args.admin} {refused}") from None
        if exc.code == 404 and not detail:
            raise CommandError(f"{args.admin} has no {path.split('?')[0]}: is it a Gatehouse control plane's admin address?") from None
        raise CommandError(detail or f"HTTP {exc.code} from {url}") from None
    except TimeoutError:
        raise CommandError(f"no answer from the control plane at {args.admin} within {args.timeout:g}s") from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise CommandError(f"no answer from the control plane at {args.admin} within {args.timeout:g}s") from None
        reason = exc.reason.strerror if isinstance(exc.reason, OSError) and exc.reason.strerror else exc.reason
        raise CommandError(f"cannot reach the control plane at {args.admin}: {reason}") from None
    except (OSError, ValueError) as exc:
        raise CommandError(f"cannot read the control plane's answer from {url}: {exc}") from None


def _run(body: Any, args: argparse.Namespace) -> int:
    try:
        code: int = body(args)
    except (CommandError, BearerCredentialError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return code


def run_status(args: argparse.Namespace) -> int:
    def body(args: argparse.Namespace) -> int:
        query = "?" + urllib.parse.urlencode({"route": args.route}) if args.route else ""
        document = _call(args, "/breakers" + query, headers=admin_credential.read_headers(args.credential_file))
        if args.json:
            json.dump(document, sys.stdout, indent=2)
            print()
        else:
            print(render_breakers(document["breakers"]))
        return 1 if any(b["phase"] != "closed" for b in document["breakers"]) else 0

    return _run(body, args)


def run_move(args: argparse.Namespace) -> int:
    def body(args: argparse.Namespace) -> int:
        payload: dict[str, str] = {"reason": args.reason} if args.reason else {}
        if getattr(args, "open_for", None):
            payload["openFor"] = args.open_for
        namespace, _, name = args.route.partition("/")
        path = f"/breakers/{urllib.parse.quote(namespace, safe='')}/{urllib.parse.quote(name, safe='')}/{args.action}"
        headers = {
            "Authorization": f"Bearer {_credential(args)}",
            "X-Gatehouse-Operator": _operator(),
            "Content-Type": "application/json",
        }
        answer = _call(args, path, data=json.dumps(payload).encode(), headers=headers)
        if args.json:
            json.dump(answer, sys.stdout, indent=2)
            print()
            return 0
        state = answer["breaker"]
        verb = "now" if answer["changed"] else "already"
        print(f"{args.route}: {verb} {_phase(state)}")
        return 0

    return _run(body, args)


def _phase(state: dict[str, Any]) -> str:
    phase = str(state["phase"]).upper().replace("-", "_")
    if state["pinned"]:
        return f"{phase}, pinned until released"
    if state["phase"] == "open" and state.get("open_until"):
        return f"{phase} until {_when(state['open_until'])}, then probing"
    return phase


def _when(unix: float) -> str:
    return datetime.datetime.fromtimestamp(unix, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _age(since: float | None) -> str:
    if not since:
        return "-"
    seconds = max(0, round(time.time() - since))
    return f"{seconds}s" if seconds < 120 else f"{seconds // 60}m" if seconds < 7200 else f"{seconds // 3600}h"


def _shown(value: object) -> str:
    """Safe for a terminal: non-printable characters escaped."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in str(value))


def render_breakers(breakers: list[dict[str, Any]]) -> str:
    """The table `gatehouse breaker status` and `gatehouse status` print."""
    if not breakers:
        return "no route has a breaker (circuitBreaker.errorRate)"
    lines = [f"{'ROUTE':32} {'PHASE':34} {'SINCE':6} {'BY':9} {'CALLS':>7} {'FAILED':>7} {'SLOW':>6}  REASON"]
    for b in breakers:
        window = b.get("window") or {}
        lines.append(
            f"{_shown(b['route']):32} {_phase(b):34} {_age(b.get('since')):6} {b['actor']:9} "
            f"{window.get('calls', 0):>7g} {window.get('failures', 0):>7g} {window.get('slow', 0):>6g}  {_shown(b['reason'])}"
        )
    return "\n".join(lines)
