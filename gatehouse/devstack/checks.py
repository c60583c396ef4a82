"""What `gatehouse dev` shows: curl lines, each with the answer it should give, and the
checks `gatehouse dev --check` runs, one verdict line each (gatehouse/devstack/steps.py)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from functools import partial

from gatehouse.devstack.features import banner_lines, run_feature_checks
from gatehouse.devstack.stack import DevStack, git, http_get
from gatehouse.devstack.steps import Steps

READ = "orders:read"
WRITE = "orders:read orders:write"


@dataclass(frozen=True)
class Check:
    path: str
    scope: str | None
    """The token's scope, or None for no token at all."""
    status: int
    upstream: str | None
    what: str


LIMITED = "/api/v2/quotes"
QUOTA = 5
RATE_LIMIT_HEADERS = ("x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset")

CHECKS = (
    Check("/api/v2/orders/42", None, 401, None, "an authenticated route without a token"),
    Check("/api/v2/orders/42", READ, 200, "order-service", "{id} template, token with orders:read"),
    Check("/api/v2/orders/bulk", READ, 403, None, "needs orders:write: insufficient_scope"),
    Check("/api/v2/orders/bulk", WRITE, 200, "order-service-v3", "exact path beats the {id} template"),
    Check("/api/v2/orders/42/items/7", None, 200, "order-service", "public /** prefix, path rewritten to /legacy/orders/..."),
    Check("/reports/2026-11.csv", READ, 200, "order-service-v3", "regex match"),
    Check("/api/v1/anything", None, 410, None, "a disabled route answered by Envoy itself"),
    Check("/nowhere", READ, 404, None, "no route"),
)


def banner(stack: DevStack) -> str:
    ports = stack.ports
    base = f"http://127.0.0.1:{ports.listener}"
    admin = f"--admin 127.0.0.1:{ports.ext_authz_admin} --credential-file {stack.admin_credential}"
    read = " ".join(stack.issuer.token_command(scope=READ))
    write = " ".join(stack.issuer.token_command(scope=WRITE))
    lines = [
        "",
        "Gatehouse dev stack is up.",
        f"  gateway       {base}",
        f"  control plane http://127.0.0.1:{ports.admin}/status   (gatehouse status --admin http://127.0.0.1:{ports.admin})",
        f"  status page   http://127.0.0.1:{ports.admin}/   (sources, routes, Envoys and their ACKs/NACKs, in a browser)",
        f"  ext_authz     127.0.0.1:{ports.ext_authz_http} (HTTP checks; gRPC on {ports.ext_authz}; metrics http://127.0.0.1:{ports.ext_authz_metrics}/metrics)",
        f"  ratelimit     127.0.0.1:{ports.ratelimit} (metrics http://127.0.0.1:{ports.ratelimit_metrics}/metrics)",
        f"  telemetry     127.0.0.1:{ports.telemetry} (metrics http://127.0.0.1:{ports.telemetry_metrics}/metrics)",
        f"  access log    {stack.access_log}   (one JSON event per request: tail -f it)",
        f"  envoy admin   http://127.0.0.1:{ports.envoy_admin}/",
        f"  redis         127.0.0.1:{ports.redis}",
        f"  logs          {stack.logs}/",
        "",
        "Tokens (signed by a local development key that ext_authz trusts):",
        f"  export READ=$({read})",
        f"  export WRITE=$({write})",
        "",
        "Try:",
    ]
    for check in CHECKS:
        auth = "" if check.scope is None else f' -H "Authorization: Bearer ${"READ" if check.scope == READ else "WRITE"}"'
        expect = f"{check.status} from {check.upstream}" if check.upstream else str(check.status)
        lines.append(f"  curl -si{auth} {base}{check.path}    # {expect}: {check.what}")
    checkout = stack.repo / "routes" / "checkout.yaml"
    lines += [
        "",
        f"Rate limit: {LIMITED} allows {QUOTA} requests per 10 s per client IP, then 429 with Retry-After:",
        f"  for i in $(seq {QUOTA + 1}); do curl -s -o /dev/null -w '%{{http_code}} ' {base}{LIMITED}; done; echo"
        f"    # {' '.join(['200'] * QUOTA)} 429",
        f"  curl -si {base}{LIMITED} | grep -i -e ratelimit -e retry-after",
        "",
        "Block the account, then unblock it (every ext_authz instance follows within a second):",
        f"  gatehouse block --sub alice --ttl 10m {admin}",
        f'  curl -si -H "Authorization: Bearer $READ" {base}/api/v2/orders/42    # 403: the account is blocked',
        f"  gatehouse unblock --sub alice {admin}",
        "",
        *banner_lines(stack),
        "",
        "Change a route live (Envoy is not restarted): send all checkout traffic to v3",
        f"  sed -i 's/weight: 90/weight: 0/; s/weight: 10/weight: 100/' {checkout}",
        f"  git -C {stack.repo} commit -qam 'checkout: all traffic to v3'",
        f"  curl -s {base}/api/v2/checkout    # now always order-service-v3",
        "",
        "Ctrl-C stops everything.",
    ]
    return "\n".join(lines)


def _upstream_of(body: bytes) -> str | None:
    try:
        value = json.loads(body).get("upstream")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def run_checks(stack: DevStack, steps: Steps) -> None:
    """Every curl line, the rate limit, the one-call path, the access log, the features
    (waiting room, API key, token swap, breaker move), then a live route change: one step
    each, stopping at the first failure (StepFailed)."""
    tokens: dict[str, str] = {}
    with steps.step("tokens minted (gatehouse token, the dev issuer's key)"):
        tokens.update({scope: stack.token(scope=scope) for scope in (READ, WRITE)})
    for check in CHECKS:
        expect = f"{check.status} from {check.upstream}" if check.upstream else str(check.status)
        steps.check(f"GET {check.path} -> {expect}: {check.what}", partial(_check_request, stack, check, tokens))
    steps.check(f"rate limit {LIMITED}: {QUOTA} x 200 then 429 with Retry-After", partial(_check_rate_limit, stack))
    steps.check("token and route limit decided in one call (X-RateLimit-Limit: 100)", partial(_check_one_call, stack, tokens[READ]))
    steps.check(f"access log {stack.access_log} has the requests", partial(_check_access_log, stack))
    run_feature_checks(stack, steps, tokens[READ])
    steps.check("live route change: commit moves /api/v2/checkout to order-service-v3", partial(_check_live_change, stack))


def _check_request(stack: DevStack, check: Check, tokens: dict[str, str]) -> str | None:
    headers = {} if check.scope is None else {"Authorization": f"Bearer {tokens[check.scope]}"}
    got, _, body = http_get(stack.url(check.path), headers)
    upstream = _upstream_of(body)
    if got != check.status or (check.upstream is not None and upstream != check.upstream):
        expected = f"{check.status} from {check.upstream}" if check.upstream else str(check.status)
        return f"expected {expected}, got {got}" + (f" from {upstream}" if upstream else "")
    return None


def _check_live_change(stack: DevStack) -> str | None:
    checkout = stack.repo / "routes" / "checkout.yaml"
    checkout.write_text(checkout.read_text().replace("weight: 90", "weight: 0").replace("weight: 10", "weight: 100"))
    git(stack.repo, "commit", "-qam", "checkout: all traffic to v3")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if {_upstream_of(http_get(stack.url("/api/v2/checkout"))[2]) for _ in range(20)} == {"order-service-v3"}:
            return None
        time.sleep(0.1)
    return "/api/v2/checkout did not move to order-service-v3 within 5s"


def _check_one_call(stack: DevStack, token: str) -> str | None:
    """An authenticated route's own limit comes back from the authorization call itself."""
    status, headers, _ = http_get(stack.url("/api/v2/orders/42"), {"Authorization": f"Bearer {token}"})
    lowered = {k.lower(): v for k, v in headers.items()}
    if status != 200 or lowered.get("x-ratelimit-limit") != "100":
        return f"/api/v2/orders/42: expected 200 with X-RateLimit-Limit: 100, got {status} {lowered.get('x-ratelimit-limit')}"
    return None


def _check_rate_limit(stack: DevStack) -> str | None:
    """QUOTA requests pass with X-RateLimit-* headers, the next is 429 with Retry-After."""
    replies = [http_get(stack.url(LIMITED)) for _ in range(QUOTA + 1)]
    statuses = [status for status, _, _ in replies]
    if statuses != [200] * QUOTA + [429]:
        return f"expected {QUOTA} × 200 then 429, got {statuses}"
    for status, headers, _ in replies:
        lowered = {k.lower(): v for k, v in headers.items()}
        missing = [h for h in (*RATE_LIMIT_HEADERS, *(("retry-after",) if status == 429 else ())) if h not in lowered]
        if missing:
            return f"a {status} answer lacks {', '.join(missing)}"
    return None


def _check_access_log(stack: DevStack) -> str | None:
    """The requests above arrive in the access log, with the verified user and the 429s."""
    deadline = time.monotonic() + 10
    events: list[dict[str, object]] = []
    while time.monotonic() < deadline:
        try:
            events = [json.loads(line) for line in stack.access_log.read_text().splitlines() if line.strip()]
        except (OSError, ValueError):
            events = []
        if any(e.get("status") == 429 for e in events) and any(e.get("user_id") == "alice" for e in events):
            return None
        time.sleep(0.2)
    return f"expected events for the requests above (a 429, one by user alice), got {len(events)} events"
