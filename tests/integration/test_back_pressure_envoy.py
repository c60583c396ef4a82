"""Back pressure through real Envoy: an upstream answering 503 to every other request gets
fewer requests when its route sets ``backPressure`` than an identical one whose route does
not, under the same load in the same run (counted at the upstreams); a healthy upstream
behind ``backPressure`` gets every request."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from tests.harness.route_repo import route_doc
from tests.harness.upstream import EchoUpstream
from tests.integration.conftest import StackFactory
from tests.integration.test_gateway_errors_envoy import gateway_error
from tests.integration.test_route_shields_envoy import served

REQUESTS = 300
BACK_PRESSURE = {"successRateThreshold": 95, "window": "10s", "failOn": [503]}


def fail_half(upstream: EchoUpstream) -> None:
    request = urllib.request.Request(f"{upstream.url}/admin/fail?status=503&ratio=0.5", method="POST")
    with urllib.request.urlopen(request, timeout=5) as response:
        data: dict[str, Any] = json.loads(response.read())
    assert data["failing"] == 503, data


def test_back_pressure_sends_fewer_requests_to_a_failing_upstream(make_stack: StackFactory) -> None:
    stack = make_stack(upstreams=("svc-on", "svc-off", "svc-ok"))
    stack.commit_routes(
        {
            "r.yaml": [
                route_doc(
                    "throttled",
                    {"auth": {"required": False},
                        "match": {"pathPrefix": "/throttled"},
                        "backends": [{"service": "svc-on", "port": 8080}],
                        "backPressure": BACK_PRESSURE,
                    },
                ),
                route_doc("plain", {"auth": {"required": False}, "match": {"pathPrefix": "/plain"}, "backends": [{"service": "svc-off", "port": 8080}]}),
                route_doc(
                    "healthy",
                    {"auth": {"required": False},
                        "match": {"pathPrefix": "/healthy"},
                        "backends": [{"service": "svc-ok", "port": 8080}],
                        "backPressure": BACK_PRESSURE,
                    },
                ),
            ]
        }
    )
    stack.start(wait_path="/plain")
    stack.wait_status("/throttled", 200)
    stack.wait_status("/healthy", 200)
    on, off, ok = (stack.upstreams[name] for name in ("svc-on", "svc-off", "svc-ok"))
    fail_half(on)
    fail_half(off)
    before = {u.name: served(u) for u in (on, off, ok)}

    statuses: dict[str, list[int]] = {"throttled": [], "plain": [], "healthy": []}
    refused = None
    for _ in range(REQUESTS):  # the same load on each route, interleaved
        for path in statuses:
            reply = stack.get(f"/{path}")
            statuses[path].append(reply.status)
            if path == "throttled" and reply.status == 503 and reply.headers.get("x-upstream") is None:
                refused = reply

    got = {u.name: served(u) - before[u.name] for u in (on, off, ok)}
    # Without back pressure every request reaches the failing upstream; half fail.
    assert got["svc-off"] == REQUESTS, got
    assert statuses["plain"].count(503) == REQUESTS // 2, statuses["plain"].count(503)
    # With it, Envoy refuses a share itself (about 45 % at a 50 % success rate and a 95 %
    # threshold, less while the window fills): the upstream sees clearly fewer.
    assert got["svc-on"] <= 0.8 * REQUESTS, got
    assert statuses["throttled"].count(200) + statuses["throttled"].count(503) == REQUESTS
    assert refused is not None, "a refusal answered by the gateway"
    gateway_error(refused, 503, "back_pressure")
    throttled_by_envoy = REQUESTS - got["svc-on"]
    assert stack.envoy is not None
    stats = stack.envoy.stats("admission_control")
    rejected = sum(v for k, v in stats.items() if k.endswith("admission_control.rq_rejected"))
    assert rejected == throttled_by_envoy, (stats, got)
    # A healthy upstream behind the same option gets every request.
    assert got["svc-ok"] == REQUESTS and statuses["healthy"] == [200] * REQUESTS, (got, set(statuses["healthy"]))
