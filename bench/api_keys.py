"""What an API key costs the HTTP check, in process, beside a warm token measured in the same run.

The handler ``Http1Server`` calls (``HttpCheck``) with its real parts: an RS256 issuer
(static key, ``tests/harness/issuer.py``), the verified-token cache, the revocation mirror
on a real redis-server (started here, on loopback) holding the keys, and no rate limits
(they cost the same whichever credential names the caller). Scenarios, each ``--calls``
checks, best of ``--repeats`` (CPU time, ``time.process_time_ns``):

    token_baseline     a warm token on a token-only route              (the baseline)
    token_on_key_route the same token on a route that also takes keys  (what the key option adds to tokens)
    api_key            a valid key on a keys-only route                 (sha256 + dict lookup + identity)
    api_key_unknown    an unknown key (401, the denial's JSON)
    neither            no credential on a key-or-token route (401 with both challenges)

    .venv/bin/python -m bench.api_keys [--calls 20000] [--repeats 5] > bench/results/api-keys.json
    .venv/bin/python -m bench.api_keys --calls 500 --repeats 1      # the quickest run

One JSON document on stdout: µs per check for each, and each as a ratio of the baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import structlog

from bench.kit.machine import describe
from bench.kit.run import Progress, Run, add_workdir_arguments
from ext_authz.check.api_keys import ApiKeyCheck, key_hash, new_key
from ext_authz.config import Issuer
from ext_authz.denial_audit import DenialAudit
from ext_authz.check.http_check import HttpCheck
from ext_authz.check.route_table import RouteTable
from ext_authz.check.steps import CheckParts
from servicekit.check_contract import ROUTE_HEADER
from ext_authz.tokens.jwks import IssuerKeys
from ext_authz.revocation.mirror import RevocationMirror
from ext_authz.revocation.store import RedisRevocationStore
from ext_authz.service import Authorizer
from ext_authz.tokens.verifier import TokenVerifier
from servicekit.api_key_store import ApiKey, redis_api_keys
from servicekit.audit import MemoryAuditSink
from servicekit.http1_server import Request
from servicekit.protos.gatehouse.policy.v1 import policy_pb2
from tests.harness.issuer import TestIssuer
from tests.harness.redis import RedisServer

progress = Progress("api_keys")


def route(name: str, *, keys: bool = False, only: bool = False) -> policy_pb2.RoutePolicy:
    policy = policy_pb2.RoutePolicy(route=name)
    policy.auth.SetInParent()
    policy.auth.api_keys = keys
    policy.auth.api_keys_only = only
    return policy


async def measure(check: HttpCheck, headers: dict[str, str], calls: int, repeats: int, expect: int) -> float:
    """Best µs of CPU per check over ``repeats`` runs of ``calls``."""
    request = Request("GET", "/bench", headers)
    answer = await check(request)
    assert int(answer[9:12]) == expect, answer[:200]
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time_ns()
        for _ in range(calls):
            await check(request)
        best = min(best, (time.process_time_ns() - start) / calls / 1000)
    return best


async def run_checks(args: argparse.Namespace, redis: RedisServer, directory: Path) -> dict[str, float]:
    test_issuer = TestIssuer()
    config = Issuer.model_validate({"issuer": test_issuer.issuer, "audiences": [test_issuer.audience], "leeway": "30s",
                                    "jwksFile": str(test_issuer.write_jwks(directory / "jwks.json"))})
    keys = IssuerKeys.from_config(config, session=None)
    await keys.refresh()
    verifier = TokenVerifier([keys], cache_size=1000, max_token_bytes=8192)
    mirror = RevocationMirror(RedisRevocationStore(url=redis.url), resync_interval=60)
    await mirror.start()
    assert await mirror.wait_ready(5)
    key_id, key = new_key()
    writer, client = redis_api_keys(redis.url)
    await writer.add_key(ApiKey(key_id, "partner-a", key_hash(key), time.time()))  # as `gatehouse apikey create` does
    await client.aclose()
    deadline = time.monotonic() + 5
    while mirror.api_key(key_hash(key), time.time()) is None:
        assert time.monotonic() < deadline, "the key never reached the mirror"
        await asyncio.sleep(0.01)
    authorizer = Authorizer(verifier, {test_issuer.issuer: config}, mirror)
    table = RouteTable(CheckParts(authorizer, DenialAudit(MemoryAuditSink()), ApiKeyCheck(mirror)))
    table.replace([route("b/token"), route("b/both", keys=True), route("b/keys", keys=True, only=True)])
    check = HttpCheck(table)
    token = test_issuer.token("user-1", ttl=3600, role="admin", scope="orders:read")
    base = {"x-request-id": "bench-1", "x-forwarded-for": "203.0.113.9"}
    scenarios = {
        "token_baseline": ({**base, ROUTE_HEADER: "b/token", "authorization": f"Bearer {token}"}, 200),
        "token_on_key_route": ({**base, ROUTE_HEADER: "b/both", "authorization": f"Bearer {token}"}, 200),
        "api_key": ({**base, ROUTE_HEADER: "b/keys", "x-api-key": key}, 200),
        "api_key_unknown": ({**base, ROUTE_HEADER: "b/keys", "x-api-key": key[:-4] + "AAAA"}, 401),
        "neither": ({**base, ROUTE_HEADER: "b/both"}, 401),
    }
    results: dict[str, float] = {}
    try:
        for name, (headers, status) in scenarios.items():
            results[name] = await measure(check, headers, args.calls, args.repeats, status)
            progress(f"{name}: {results[name]:.2f} µs")
    finally:
        await mirror.stop()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    add_workdir_arguments(parser)
    args = parser.parse_args(argv)
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))  # stdout is the JSON document
    with Run("api_keys", argv, args, progress) as run:
        run.report["settings"] = {"calls": args.calls, "repeats": args.repeats,
                                  "what": "CPU µs per HttpCheck call in process (best of repeats); ratio: ÷ token_baseline, same run"}
        run.report["machine"] = describe(("PyJWT", "cryptography", "redis"), ("ext_authz", "servicekit"))
        redis = run.parts.add(RedisServer.start(log_dir=run.workdir / "redis"))
        results = asyncio.run(run_checks(args, redis, run.workdir))
    baseline = results["token_baseline"]
    run.print(
        baseline={"scenario": "token_baseline", "us_per_check": round(baseline, 2)},
        ratios={k: round(v / baseline, 3) for k, v in results.items()},
        us_per_check={k: round(v, 2) for k, v in results.items()},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
