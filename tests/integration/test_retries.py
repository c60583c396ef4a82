"""Retries apply to idempotent methods only, with the route's attempts and conditions."""

from __future__ import annotations

from tests.harness.route_repo import route_doc
from tests.integration.conftest import StackFactory


def test_retries_only_for_idempotent_methods(make_stack: StackFactory) -> None:
    stack = make_stack(upstreams=("svc-a",))
    stack.commit_routes(
        {
            "r.yaml": [
                route_doc(
                    "flaky",
                    {
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
    stat = "cluster.default.svc-a.8080.upstream_rq_retry"

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
