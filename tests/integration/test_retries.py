"""Retries: idempotent methods only (or keyed ones), on a reset too, and never more than the
cluster's retry budget allows during an outage, counted at the upstream."""

from __future__ import annotations

import json
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from tests.harness.gateway import GatewayStack
from tests.harness.http_client import Client
from tests.harness.route_repo import route_doc
from tests.integration.conftest import StackFactory


def test_retries_only_for_idempotent_methods(make_stack: StackFactory) -> None:
    stack = make_stack(upstreams=("svc-a",))
    stack.commit_routes(
        {
            "r.yaml": [
                route_doc(
                    "flaky",
                    {"auth": {"required": False},
                        "match": {"pathPrefix": "/flaky"},
                        "backends": [{"service": "svc-a", "port": 8080}],
                        "retries": {"attempts": 2, "retryOn": ["503"]},
                        "timeouts": {"request": "5s", "perTry": "1s"},
                    },
                )
            ]
        }
    )
    stack.start(wait_path="/flaky")
    assert stack.envoy is not None
    stat = "cluster.default_svc-a_8080.upstream_rq_retry"

    def retries() -> int:
        assert stack.envoy is not None
        return stack.envoy.stats(filter=r"upstream_rq_retry$").get(stat, 0)

    before = retries()
    assert stack.get("/flaky?status=503").status == 503
    assert retries() == before + 2, "GET should be retried twice on 503"

    for method in ("POST", "PATCH"):
        before = retries()
        assert stack.get("/flaky?status=503", method=method).status == 503
        assert retries() == before, f"{method} is not idempotent and must not be retried"

    before = retries()
    assert stack.get("/flaky?status=503", method="PUT").status == 503
    assert retries() == before + 2


def served(stack: GatewayStack) -> int:
    with urllib.request.urlopen(f"{stack.upstreams['svc-a'].url}/admin/fail", timeout=5) as response:
        count: int = json.loads(response.read())["served"]
        return count


def test_a_reset_is_retried_for_get_and_for_post_only_with_the_idempotency_key(make_stack: StackFactory) -> None:
    stack = make_stack(upstreams=("svc-a",))
    retries = {"attempts": 2, "retryOn": ["reset"], "idempotencyKeyHeader": "idempotency-key"}
    stack.commit_routes(
        {"r.yaml": [route_doc("r", {"auth": {"required": False}, "match": {"pathPrefix": "/r"}, "backends": [{"service": "svc-a", "port": 8080}], "retries": retries})]}
    )
    stack.start(wait_path="/r")

    def attempts(method: str, headers: dict[str, str] | None = None) -> int:
        before = served(stack)
        reply = stack.get("/r?reset=1", method=method, headers=headers or {})
        assert reply.status == 503 and b"upstream_unavailable" in reply.body, (reply.status, reply.body)
        return served(stack) - before

    assert attempts("GET") == 3, "the try and two retries"
    assert attempts("POST") == 1, "a POST without the key is never retried: it may have been applied"
    assert attempts("POST", {"idempotency-key": "order-17"}) == 3


def test_the_retry_budget_caps_amplification_in_a_full_outage(make_stack: StackFactory) -> None:
    """Every attempt fails; each request would make 4 attempts without the budget (20% of
    active requests, at least 3 retries at once)."""
    stack = make_stack(upstreams=("svc-a",))
    retries = {"attempts": 3, "retryOn": ["503"]}
    stack.commit_routes(
        {"r.yaml": [route_doc("r", {"auth": {"required": False}, "match": {"pathPrefix": "/r"}, "backends": [{"service": "svc-a", "port": 8080}], "retries": retries})]}
    )
    stack.start(wait_path="/r")
    requests = 60
    before = served(stack)
    with ThreadPoolExecutor(max_workers=requests) as pool:
        statuses = list(pool.map(lambda _: Client(stack.listener_port, timeout=20).request("/r?status=503&delay=0.2").status, range(requests)))
    attempts = served(stack) - before
    assert statuses == [503] * requests
    assert stack.envoy is not None
    overflow = stack.envoy.stats(filter=r"upstream_rq_retry_overflow$").get("cluster.default_svc-a_8080.upstream_rq_retry_overflow", 0)
    print(f"{requests} requests, {attempts} upstream attempts ({attempts / requests:.2f}x), {overflow} retries refused by the budget")
    assert overflow > 0, "the budget refused retries"
    assert attempts <= 2 * requests, f"{attempts} attempts for {requests} requests: the budget did not cap amplification"
