"""A HALF_OPEN breaker's non-probes get the route's own fallback, through a real Envoy
driven by the operator API of a real control plane: exactly ``halfOpenProbes`` requests
reach the primary upstream (counted there), every other one gets the static fallback or
goes to the fallback backend (counted there, its own status, method and body kept), and
a circuitOpen route still answers 503 circuit_open. Also the HALF_OPEN fallback answer's
latency next to the OPEN one's, in the same run (printed; run with -s to see it)."""

from __future__ import annotations

import hashlib
import http.client
import json
import statistics
import time
from pathlib import Path
from typing import Any

from tests.harness.gateway import GatewayStack
from tests.harness.http_client import Reply, wait_for
from tests.integration.conftest import StackFactory
from tests.integration.test_breaker_envoy import BREAKER, STATIC, breaker_header, move, served, start

PROBES = BREAKER["errorRate"]["halfOpenProbes"]
ROUND = 20


def half_open(stack: GatewayStack, credential: str, route: str, path: str) -> int:
    """OPEN, then HALF_OPEN once the push has landed; the probes spent by the wait."""
    move(stack, credential, route, "open", {"openFor": "10m"})
    wait_for(lambda: breaker_header(stack, path) == "open", 5, f"{path} OPEN")
    before = served(stack, "svc-a")
    move(stack, credential, route, "half-open")
    # Until the push lands, requests get the OPEN fallback; the one that sees the new
    # phase may be a probe (it reaches svc-a) or, once the probes are spent, a non-probe.
    wait_for(lambda: breaker_header(stack, path) != "open", 5, f"{path} HALF_OPEN")
    return served(stack, "svc-a") - before


def timed_round(stack: GatewayStack, path: str, count: int) -> tuple[list[Reply], list[float]]:
    client = stack.client()
    replies, durations = [], []
    try:
        for _ in range(count):
            started = time.perf_counter()
            replies.append(client.request(path))
            durations.append(time.perf_counter() - started)
    finally:
        client.close()
    return replies, durations


def quantiles_ms(durations: list[float]) -> dict[str, float]:
    ordered = sorted(durations)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(ordered[int(len(ordered) * 0.99) - 1] * 1000, 3),
    }


def is_static_fallback(reply: Reply, mark: str) -> bool:
    return (
        reply.status == STATIC["status"]
        and json.loads(reply.body) == json.loads(STATIC["body"])
        and reply.headers.get("content-type") == "application/json"
        and reply.headers.get("cache-control") == "max-age=5"
        and reply.headers.get("x-gatehouse-breaker") == mark
    )


def post(stack: GatewayStack, path: str, body: bytes) -> tuple[int, dict[str, str], Any]:
    conn = http.client.HTTPConnection("127.0.0.1", stack.listener_port, timeout=5)
    try:
        conn.request("POST", path, body=body, headers={"content-type": "application/octet-stream"})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, json.loads(response.read())
    finally:
        conn.close()


def test_half_open_static_fallback_admits_exactly_the_probes_and_circuit_open_stays(
    make_stack: StackFactory, tmp_path: Path
) -> None:
    stack, credential = start(make_stack, tmp_path)

    probed = half_open(stack, credential, "catalog", "/catalog")
    assert probed in (0, 1), probed
    before = served(stack, "svc-a")
    replies, _ = timed_round(stack, "/catalog", ROUND - probed)
    reached = served(stack, "svc-a") - before
    assert probed + reached == PROBES, (probed, reached)
    proxied = [r for r in replies if r.upstream == "svc-a"]
    fallbacks = [r for r in replies if r.upstream is None]
    assert len(proxied) == reached and len(fallbacks) == ROUND - probed - reached, replies
    for reply in proxied:
        assert reply.status == 200 and "x-gatehouse-breaker" not in reply.headers, reply
    for reply in fallbacks:
        assert is_static_fallback(reply, "half-open"), reply

    # The HALF_OPEN fallback answer against the OPEN one, same gateway, same run.
    half_replies, half_durations = timed_round(stack, "/catalog", 300)
    assert all(is_static_fallback(r, "half-open") for r in half_replies)
    move(stack, credential, "catalog", "open", {"openFor": "10m"})
    wait_for(lambda: breaker_header(stack, "/catalog") == "open", 5, "/catalog OPEN again")
    open_replies, open_durations = timed_round(stack, "/catalog", 300)
    assert all(is_static_fallback(r, "open") for r in open_replies)
    assert served(stack, "svc-a") == before + reached, "no request reached svc-a after the probes"
    half, opened = quantiles_ms(half_durations), quantiles_ms(open_durations)
    print(json.dumps({"static_fallback": {"half_open": half, "open": opened}}))
    # Medians: the p99 of 300 requests on a shared 2-core machine swings by milliseconds.
    assert half["p50_ms"] < opened["p50_ms"] + 1, (half, opened)

    # circuitOpen (the default): the bucket still denies, with the 503 circuit_open.
    probed = half_open(stack, credential, "orders", "/orders")
    before = served(stack, "svc-a")
    replies, _ = timed_round(stack, "/orders", ROUND - probed)
    reached = served(stack, "svc-a") - before
    assert probed + reached == PROBES, (probed, reached)
    denied = [r for r in replies if r.status != 200]
    assert len(denied) == ROUND - probed - reached
    for reply in denied:
        assert reply.status == 503 and reply.headers["x-gatehouse-breaker"] == "half-open", reply
        assert reply.json()["error"]["code"] == "circuit_open" and reply.headers["content-type"] == "application/json"


def test_half_open_fallback_backend_admits_exactly_the_probes_and_keeps_status_method_and_body(
    make_stack: StackFactory, tmp_path: Path
) -> None:
    stack, credential = start(make_stack, tmp_path)

    probed = half_open(stack, credential, "search", "/search")
    assert probed in (0, 1), probed
    primary, fallback = served(stack, "svc-a"), served(stack, "svc-b")
    replies, _ = timed_round(stack, "/search/q", ROUND - probed)
    reached = served(stack, "svc-a") - primary
    assert probed + reached == PROBES, (probed, reached)
    sent_to_fallback = [r for r in replies if r.upstream == "svc-b"]
    assert len(sent_to_fallback) == ROUND - probed - reached == served(stack, "svc-b") - fallback
    assert len([r for r in replies if r.upstream == "svc-a"]) == reached
    for reply in sent_to_fallback:
        assert reply.status == 200 and reply.headers["x-gatehouse-breaker"] == "half-open", reply
        assert reply.json()["headers"]["x-gatehouse-breaker"] == "half-open", "the fallback's request is marked"

    # The fallback backend's own answer: its status (not the bucket's 503), the client's
    # method and body.
    reply = stack.get("/search/q?status=207")
    assert reply.status == 207 and reply.upstream == "svc-b", reply
    body = b"x" * 3000
    status, headers, echoed = post(stack, "/search/q", body)
    assert status == 200 and echoed["upstream"] == "svc-b" and echoed["method"] == "POST", echoed
    assert echoed["bodySha256"] == hashlib.sha256(body).hexdigest() and headers["x-gatehouse-breaker"] == "half-open"
    assert served(stack, "svc-a") == primary + reached, "no request reached svc-a after the probes"

    half_replies, half_durations = timed_round(stack, "/search/q", 300)
    assert all(r.upstream == "svc-b" for r in half_replies)
    move(stack, credential, "search", "open", {"openFor": "10m"})
    wait_for(lambda: breaker_header(stack, "/search") == "open", 5, "/search OPEN again")
    open_replies, open_durations = timed_round(stack, "/search/q", 300)
    assert all(r.upstream == "svc-b" and r.headers["x-gatehouse-breaker"] == "open" for r in open_replies)
    print(json.dumps({"fallback_backend": {"half_open": quantiles_ms(half_durations), "open": quantiles_ms(open_durations)}}))
