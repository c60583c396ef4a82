"""The route features `gatehouse dev` shows beyond routing and limits: a waiting room, an
API key, token swap and a route breaker. Each has its route in examples/routes (launch,
partners, billing, inventory), lines in the banner, and one `--check` step that does what
those lines do.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial

import jwt

from gatehouse.devstack.stack import UPSTREAM_ISSUER, DevStack, http_get
from gatehouse.devstack.steps import Steps

LAUNCH = "/api/v2/launch"
PARTNERS = "/api/v2/partners/orders"
BILLING = "/api/v2/billing/invoices"
INVENTORY = "/api/v2/inventory"
CONSUMER = "partner-a"
SWAP_AUDIENCE = "legacy-billing"
"""examples/routes/billing.yaml's upstreamToken.audience."""
BREAKER_ROUTE = "shop/inventory"
FALLBACK = {"items": [], "fallback": True}
"""examples/routes/inventory.yaml's fallback body."""
SETTLE_S = 5.0
"""A key reaching every mirror, a breaker move reaching Envoy: well under a second; checked up to this."""


def _json(body: bytes) -> dict[str, object]:
    try:
        value = json.loads(body)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _sent(seen: dict[str, object]) -> dict[str, object]:
    """The request headers the echo upstream reports it received."""
    headers = seen.get("headers")
    return headers if isinstance(headers, dict) else {}


def _lowered(headers: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def _until(attempt: Callable[[], str | None], timeout: float = SETTLE_S) -> str | None:
    """Retry ``attempt`` (None: done, else why not yet) until done or ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        reason = attempt()
        if reason is None or time.monotonic() > deadline:
            return reason
        time.sleep(0.1)


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gatehouse", *argv], capture_output=True, text=True, timeout=30)


def banner_lines(stack: DevStack) -> list[str]:
    base = f"http://127.0.0.1:{stack.ports.listener}"
    breaker = f"--admin http://127.0.0.1:{stack.ports.admin} --credential-file {stack.operator_credential}"
    return [
        "",
        f"Waiting room: {LAUNCH} admits 1 request a second; the next one waits with a ticket:",
        f"  curl -s -o /dev/null -w '%{{http_code}} ' {base}{LAUNCH}; curl -si {base}{LAUNCH} | grep -i -e x-gatehouse -e retry-after"
        "    # 200, then 503 waiting with x-gatehouse-ticket",
        f"  curl -si -H 'x-gatehouse-ticket: <that ticket>' {base}{LAUNCH}    # after Retry-After: 200 (the ticket is spent)",
        "",
        "API key (/api/v2/partners takes keys only; the upstream sees the consumer, never the key):",
        f"  export KEY=$(gatehouse apikey create --consumer {CONSUMER} --config {stack.workdir / 'ext-authz.yaml'})",
        f'  curl -si -H "x-api-key: $KEY" {base}{PARTNERS}    # 200 from order-service, x-user-id: {CONSUMER}',
        "",
        f"Token swap: order-service-v3 gets a token ext_authz signed for audience {SWAP_AUDIENCE}, never yours:",
        f'  curl -s -H "Authorization: Bearer $READ" {base}{BILLING}    # 200; its headers.authorization is not $READ',
        "",
        "Route breaker: open it by hand and Envoy answers the fallback; close it again:",
        f"  gatehouse breaker open {BREAKER_ROUTE} {breaker}",
        f"  curl -s {base}{INVENTORY}    # {json.dumps(FALLBACK)}",
        f"  gatehouse breaker close {BREAKER_ROUTE} {breaker}",
    ]


def run_feature_checks(stack: DevStack, steps: Steps, token: str) -> None:
    """One step per feature; ``token``: a dev token with orders:read (sub alice)."""
    steps.check(f"waiting room {LAUNCH}: 200, then 503 with a ticket, admitted with it after Retry-After", partial(_check_waiting_room, stack))
    steps.check(f"API key: gatehouse apikey create, {PARTNERS} -> 200 as {CONSUMER}, 401 without", partial(_check_api_key, stack))
    steps.check(f"token swap {BILLING}: the upstream got ext_authz's token for {SWAP_AUDIENCE}, not the client's",
                partial(_check_token_swap, stack, token))
    steps.check(f"breaker move: gatehouse breaker open {BREAKER_ROUTE} -> the fallback, close -> order-service",
                partial(_check_breaker, stack))


def _check_waiting_room(stack: DevStack) -> str | None:
    url = stack.url(LAUNCH)
    first, _, _ = http_get(url)
    status, headers, body = http_get(url)
    found = _lowered(headers)
    if (first, status, found.get("x-gatehouse-waiting-room")) != (200, 503, "waiting") or "x-gatehouse-ticket" not in found:
        return f"expected 200, then 503 waiting with a ticket; got {first}, then {status} {body[:120]!r}"
    ticket = found["x-gatehouse-ticket"]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        time.sleep(float(found.get("retry-after", "1")))
        status, headers, body = http_get(url, {"x-gatehouse-ticket": ticket})
        found = _lowered(headers)
        if status == 200:
            return None if _json(body).get("upstream") == "order-service" else f"admitted, but the answer is {body[:120]!r}"
        if status != 503 or found.get("x-gatehouse-waiting-room") != "waiting":
            return f"coming back with the ticket: {status} {body[:120]!r}"
    return "the ticket was not admitted within 15 s"


def _check_api_key(stack: DevStack) -> str | None:
    created = _cli("apikey", "create", "--consumer", CONSUMER, "--config", str(stack.workdir / "ext-authz.yaml"))
    key = created.stdout.strip()
    if created.returncode != 0 or not key:
        return f"gatehouse apikey create: exit {created.returncode}: {created.stderr.strip().splitlines()[-1:]}"
    url = stack.url(PARTNERS)
    without = http_get(url)[0]
    if without != 401:
        return f"without a key: expected 401, got {without}"

    def with_key() -> str | None:
        status, _, body = http_get(url, {"x-api-key": key})
        seen = _json(body)
        sent = _sent(seen)
        if status != 200 or seen.get("upstream") != "order-service" or sent.get("x-user-id") != CONSUMER:
            return f"with the key: expected 200 from order-service as {CONSUMER}, got {status} {sent.get('x-user-id')}"
        return "the upstream saw the key" if "x-api-key" in sent else None

    return _until(with_key)


def _check_token_swap(stack: DevStack, token: str) -> str | None:
    status, _, body = http_get(stack.url(BILLING), {"Authorization": f"Bearer {token}"})
    seen = _json(body)
    sent = _sent(seen)
    if status != 200 or seen.get("upstream") != "order-service-v3":
        return f"expected 200 from order-service-v3, got {status} {body[:120]!r}"
    scheme, _, swapped = str(sent.get("authorization", "")).partition(" ")
    if scheme.lower() != "bearer" or not swapped or swapped == token:
        return "the upstream did not get a token of ext_authz's own"
    jwks_status, _, jwks = http_get(f"http://127.0.0.1:{stack.ports.ext_authz_metrics}/.well-known/jwks.json")
    if jwks_status != 200:
        return f"ext_authz's JWKS: {jwks_status}"
    try:
        keys = jwt.PyJWKSet.from_dict(json.loads(jwks))
        kid = jwt.get_unverified_header(swapped).get("kid")
        key = next(k for k in keys.keys if k.key_id == kid)
        claims = jwt.decode(swapped, key, algorithms=["ES256"], audience=SWAP_AUDIENCE, issuer=UPSTREAM_ISSUER)
    except (jwt.PyJWTError, StopIteration, ValueError) as exc:
        return f"the upstream's token does not verify with ext_authz's JWKS: {exc or type(exc).__name__}"
    return None if claims.get("sub") == "alice" else f"the upstream's token is for {claims.get('sub')!r}, not alice"


def _check_breaker(stack: DevStack) -> str | None:
    url = stack.url(INVENTORY)
    credential = ["--admin", f"http://127.0.0.1:{stack.ports.admin}", "--credential-file", str(stack.operator_credential)]

    def answered_by(expected: str) -> str | None:
        status, _, body = http_get(url)
        seen = _json(body)
        if expected == "fallback":
            return None if (status, seen) == (200, FALLBACK) else f"expected the fallback, got {status} {body[:120]!r}"
        return None if status == 200 and seen.get("upstream") == expected else f"expected 200 from {expected}, got {status} {body[:120]!r}"

    for action, expected in (("open", "fallback"), ("close", "order-service")):
        moved = _cli("breaker", action, BREAKER_ROUTE, *credential, "--reason", "gatehouse dev --check")
        if moved.returncode != 0:
            return f"gatehouse breaker {action}: exit {moved.returncode}: {(moved.stderr or moved.stdout).strip()}"
        reason = _until(partial(answered_by, expected))
        if reason is not None:
            return f"after breaker {action}: {reason}"
    return None
