"""Route shields through real Envoy: idempotency-keyed retries, IP access lists (RBAC)
and the local rate-limit shield, counting what the echo upstream actually served."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

from tests.harness.route_repo import route_doc
from tests.harness.upstream import EchoUpstream
from tests.integration.conftest import StackFactory
from tests.integration.test_gateway_errors_envoy import gateway_error

SERVICE = "svc-a"
BACKEND = [{"service": SERVICE, "port": 8080}]


def served(upstream: EchoUpstream) -> int:
    """Requests the upstream has answered so far (its /admin/fail report)."""
    with urllib.request.urlopen(f"{upstream.url}/admin/fail", timeout=5) as response:
        data: dict[str, Any] = json.loads(response.read())
        count: int = data["served"]
        return count


def test_post_is_retried_only_with_the_idempotency_key(make_stack: StackFactory) -> None:
    stack = make_stack(upstreams=(SERVICE,))
    stack.commit_routes(
        {
            "r.yaml": [
                route_doc(
                    "keyed",
                    {"auth": {"required": False},
                        "match": {"pathPrefix": "/keyed"},
                        "backends": BACKEND,
                        "retries": {"attempts": 2, "retryOn": ["503"], "idempotencyKeyHeader": "idempotency-key"},
                        "timeouts": {"request": "5s", "perTry": "1s"},
                    },
                )
            ]
        }
    )
    stack.start(wait_path="/keyed")
    upstream = stack.upstreams[SERVICE]

    def attempts(method: str, headers: dict[str, str] | None = None) -> int:
        before = served(upstream)
        assert stack.get("/keyed?status=503", method=method, headers=headers or {}).status == 503
        return served(upstream) - before

    assert attempts("POST", {"idempotency-key": "k-1"}) == 3, "a keyed POST: the try and 2 retries"
    assert attempts("PATCH", {"idempotency-key": "k-2"}) == 3
    assert attempts("POST") == 1, "a POST without the key is never retried"
    assert attempts("PATCH") == 1
    assert attempts("GET") == 3, "idempotent methods are retried with or without the key"


def test_ip_allow_and_deny_lists_answer_403(make_stack: StackFactory) -> None:
    stack = make_stack(upstreams=(SERVICE,))
    stack.commit_routes(
        {
            "r.yaml": [
                route_doc("open", {"auth": {"required": False}, "match": {"pathPrefix": "/open"}, "backends": BACKEND}),
                route_doc(
                    "denied",
                    {"auth": {"required": False}, "match": {"pathPrefix": "/denied"}, "backends": BACKEND, "access": {"deny": ["127.0.0.1/32"]}},
                ),
                route_doc(
                    "internal",
                    {"auth": {"required": False}, "match": {"pathPrefix": "/internal"}, "backends": BACKEND, "access": {"allow": ["10.0.0.0/8"]}},
                ),
                route_doc(
                    "loopback",
                    {"auth": {"required": False},
                        "match": {"pathPrefix": "/loopback"},
                        "backends": BACKEND,
                        "access": {"allow": ["127.0.0.0/8"], "deny": ["10.0.0.0/8"]},
                    },
                ),
            ]
        }
    )
    stack.start(wait_path="/open")
    upstream = stack.upstreams[SERVICE]
    before = served(upstream)
    assert gateway_error(stack.get("/denied", headers={"x-request-id": "req-403"}), 403, "access_denied")[
        "request_id"
    ] == "req-403"
    assert stack.get("/internal").status == 403
    # A spoofed X-Forwarded-For does not help: the check is on the TCP peer.
    assert stack.get("/internal", headers={"x-forwarded-for": "10.1.1.1"}).status == 403
    assert served(upstream) == before, "a refused request never reaches the upstream"
    assert stack.get("/open").status == 200
    assert stack.get("/loopback").status == 200


def test_the_shield_answers_429_without_reaching_the_upstream(make_stack: StackFactory) -> None:
    stack = make_stack(upstreams=(SERVICE,))
    stack.commit_routes(
        {
            "r.yaml": [
                route_doc("open", {"auth": {"required": False}, "match": {"pathPrefix": "/open"}, "backends": BACKEND}),
                route_doc(
                    "shielded",
                    {"auth": {"required": False},
                        "match": {"pathPrefix": "/shielded"},
                        "backends": BACKEND,
                        "shield": {"requestsPerSecond": 1, "burst": 3},
                    },
                ),
            ]
        }
    )
    stack.start(wait_path="/open")
    upstream = stack.upstreams[SERVICE]
    before = served(upstream)
    started = time.monotonic()
    replies = [stack.get("/shielded") for _ in range(10)]
    statuses = [r.status for r in replies]
    elapsed = time.monotonic() - started
    ok = statuses.count(200)
    assert ok + statuses.count(429) == 10, statuses
    # The burst of 3, plus one token per second refilled while the requests ran.
    assert statuses[:3] == [200, 200, 200] and 3 <= ok <= 3 + int(elapsed) + 1, (statuses, elapsed)
    assert statuses.count(429) >= 1, statuses
    gateway_error(next(r for r in replies if r.status == 429), 429, "rate_limited")
    assert served(upstream) - before == ok, "a shielded request never reaches the upstream"
    assert all(stack.get("/open").status == 200 for _ in range(10)), "other routes are not shielded"
