"""What token swap adds to a warm HTTP check, measured in process against the same route
without swap, in the same run (docs/upstream-token.md).

The handler is ext_authz's ``HttpCheck`` (servicekit/http1_server.py calls it per check),
built as the runtime builds it: a real verifier on an RS256 issuer's JWKS file, no
revocation mirror and no limiter (neither differs between the two routes). Routes:

    baseline   auth required, no upstreamToken
    signed     auth.upstreamToken {audience}: an ES256 internal token signed by ext_authz
    exchanged  auth.upstreamToken {audience, exchange}: warm only (the cache answers; no
               endpoint is called once the token is cached: its first miss is served by a
               real local RFC 8693 endpoint, tests/harness/token_exchange.py)

Warm: one client token, repeated (verified-token cache, identity lines and, for swap,
the upstream-token cache all hit). Rounds alternate the routes so drift on a shared
machine hits both alike; each number is the median round's CPU µs per check
(``time.process_time``). Cold signing (a new internal token per check: the miss cost) is
measured with ``UpstreamSigner.sign`` alone.

    .venv/bin/python -m bench.upstream_token                       # 7 rounds of 20,000 checks
    .venv/bin/python -m bench.upstream_token --rounds 9 --checks 50000
    .venv/bin/python -m bench.upstream_token --rounds 1 --checks 500 --signs 50   # the quickest run

One JSON document goes to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import structlog
from cryptography.hazmat.primitives.asymmetric import ec

from bench.kit.machine import describe
from bench.kit.run import Progress, Run, add_workdir_arguments
from ext_authz.config import Issuer
from ext_authz.denial_audit import DenialAudit
from ext_authz.check.http_check import HttpCheck
from ext_authz.check.route_table import RouteTable
from ext_authz.check.steps import CheckParts
from servicekit.check_contract import ROUTE_HEADER
from ext_authz.tokens.jwks import IssuerKeys
from ext_authz.service import Authorizer
from ext_authz.swap.exchange import TokenExchange
from ext_authz.tokens.verifier import TokenVerifier
from ext_authz.swap.signer import UpstreamSigner
from ext_authz.swap.tokens import SwapGrants, UpstreamTokens
from servicekit.audit import MemoryAuditSink
from servicekit.http1_server import Request
from servicekit.protos.gatehouse.policy.v1 import policy_pb2
from tests.harness.issuer import TestIssuer
from tests.harness.token_exchange import TokenExchangeServer

progress = Progress("upstream_token")
ROUTES = ("baseline", "signed", "exchanged")


def policy(name: str, exchange_url: str) -> policy_pb2.RoutePolicy:
    found = policy_pb2.RoutePolicy(route=f"bench/{name}")
    found.auth.SetInParent()
    if name != "baseline":
        found.upstream_token.audience = f"legacy-{name}"
        found.upstream_token.exchange_url = exchange_url if name == "exchanged" else ""
    return found


async def measure(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    issuer = TestIssuer()
    config = Issuer.model_validate({"issuer": issuer.issuer, "audiences": [issuer.audience], "jwksFile": str(issuer.write_jwks(directory / "jwks.json"))})
    exchange_server = TokenExchangeServer(expires_in=3600).start()
    try:
        async with aiohttp.ClientSession() as session:
            keys = IssuerKeys.from_config(config, session=None)
            await keys.refresh()
            verifier = TokenVerifier([keys], cache_size=1000, max_token_bytes=8192)
            authorizer = Authorizer(verifier, {issuer.issuer: config}, None)
            signer = UpstreamSigner(ec.generate_private_key(ec.SECP256R1()), issuer="https://gateway.internal/")
            grants = SwapGrants({"bench": frozenset(f"legacy-{name}" for name in ROUTES)}, frozenset({exchange_server.url}))
            tokens = UpstreamTokens(
                signer=signer, exchange=TokenExchange(session, timeout=2.0), ttl=3600.0, cache_size=1000, grants=grants
            )
            table = RouteTable(CheckParts(authorizer, DenialAudit(MemoryAuditSink()), tokens))
            table.replace([policy(name, exchange_server.url) for name in ROUTES])
            check = HttpCheck(table)
            token = issuer.token("alice", ttl=7200)
            requests = {
                name: Request("GET", "/check/x", {"authorization": f"Bearer {token}", "x-request-id": "bench", ROUTE_HEADER: f"bench/{name}"})
                for name in ROUTES
            }
            for name, request in requests.items():  # warm every cache (the exchange's first miss is a real call)
                answer = await check(request)
                assert answer.startswith(b"HTTP/1.1 200"), answer
                assert (b"authorization: Bearer " in answer) == (name != "baseline")
            rounds: dict[str, list[float]] = {name: [] for name in ROUTES}
            for _ in range(args.rounds):
                for name in ROUTES:
                    request = requests[name]
                    start = time.process_time()
                    for _ in range(args.checks):
                        await check(request)
                    rounds[name].append((time.process_time() - start) / args.checks * 1e6)
            sign_start = time.process_time()
            for index in range(args.signs):
                signer.sign("alice", "legacy-signed", index, index + 60)
            sign_us = (time.process_time() - sign_start) / args.signs * 1e6
            exchanges = len(exchange_server.requests)
    finally:
        exchange_server.stop()
    median = {name: statistics.median(values) for name, values in rounds.items()}
    return {
        "warm_us_per_check": {name: round(value, 2) for name, value in median.items()},
        "warm_us_per_check_rounds": {name: [round(v, 2) for v in values] for name, values in rounds.items()},
        "warm_ratio_to_baseline": {name: round(median[name] / median["baseline"], 3) for name in ROUTES if name != "baseline"},
        "warm_added_us": {name: round(median[name] - median["baseline"], 2) for name in ROUTES if name != "baseline"},
        "cold_es256_sign_us": round(sign_us, 1),
        "exchange_calls": exchanges,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--checks", type=int, default=20_000, help="checks per route per round")
    parser.add_argument("--signs", type=int, default=2_000, help="ES256 signatures for the cold cost")
    add_workdir_arguments(parser)
    args = parser.parse_args(argv)
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=sys.stderr))  # stdout is the JSON
    with Run("upstream_token", argv, args, progress) as run:
        run.report["settings"] = {"method": "in-process HttpCheck, CPU time (process_time), median of alternating rounds",
                                  "rounds": args.rounds, "checks_per_round": args.checks, "signs": args.signs}
        run.report["machine"] = describe(["pyjwt", "cryptography"], [])
        results = asyncio.run(measure(args, run.workdir))
    run.print(baseline={"route": "baseline", "warm_us_per_check": results["warm_us_per_check"]["baseline"]},
              ratios=results.pop("warm_ratio_to_baseline"), **results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
