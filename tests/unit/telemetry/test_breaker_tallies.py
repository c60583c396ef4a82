"""Breaker tallies in telemetry: which entries are calls, failures and slow, and that they
are counted ahead of the Kafka buffer (its drops must not starve a breaker)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from envoy.data.accesslog.v3 import accesslog_pb2
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc

from telemetry.als import AccessLogService
from telemetry.breaker_tallies import BreakerTallies
from telemetry.buffer import EventBuffer
from tests.harness.ports import free_port
from tests.unit.telemetry.entries import full_entry

ROUTE = "shop/orders"
CLUSTER = "shop/orders/order-service:8080"
FALLBACK = "shop/orders-fallback:8080"


def tallies(fail_on: list[str] | None = None, slow_ms: int | None = None) -> BreakerTallies:
    t = BreakerTallies()
    t.set_rules("v1", {ROUTE: {"clusters": [CLUSTER], "failOn": fail_on or ["5xx", "reset", "timeout", "connect-failure"], "slowCallMs": slow_ms}})
    return t


def entry(status: int | None = 200, *, attempts: int = 1, cluster: str = CLUSTER, route: str = ROUTE,
          total_ms: int = 14, **flags: bool) -> accesslog_pb2.HTTPAccessLogEntry:
    e = full_entry()
    common = e.common_properties
    common.ClearField("response_flags")
    common.route_name = route
    common.upstream_cluster = cluster
    common.upstream_request_attempt_count = attempts
    common.time_to_last_downstream_tx_byte.nanos = total_ms * 1_000_000
    for name, value in flags.items():
        setattr(common.response_flags, name, value)
    if status is None:
        e.response.ClearField("response_code")
    else:
        e.response.response_code.value = status
    return e


def counts(t: BreakerTallies) -> tuple[int, int, int]:
    taken = t.take()
    return (sum(x["calls"] for x in taken), sum(x["failures"] for x in taken), sum(x["slow"] for x in taken))


def test_one_entry_is_one_call_however_many_attempts_it_took() -> None:
    t = tallies()
    t.observe(entry(503, attempts=3, upstream_retry_limit_exceeded=True))
    assert counts(t) == (1, 1, 0)


@pytest.mark.parametrize(
    ("fail_on", "e", "failed"),
    [
        (["5xx"], entry(500), True),
        (["5xx"], entry(404), False),
        (["404"], entry(404), True),
        (["reset"], entry(503, upstream_remote_reset=True), True),
        (["reset"], entry(503), False),
        (["timeout"], entry(504, upstream_request_timeout=True), True),
        (["timeout"], entry(504), True),
        (["connect-failure"], entry(503, attempts=0, no_healthy_upstream=True), True),
        (["connect-failure"], entry(503, upstream_connection_failure=True), True),
        (["timeout"], entry(503, upstream_connection_failure=True), False),
    ],
)
def test_fail_on_decides_what_is_a_failure(fail_on: list[str], e: accesslog_pb2.HTTPAccessLogEntry, failed: bool) -> None:
    t = tallies(fail_on)
    t.observe(e)
    assert counts(t) == (1, int(failed), 0)


def test_only_entries_that_went_to_a_primary_cluster_count() -> None:
    t = tallies()
    t.observe(entry(200, cluster=FALLBACK))  # a fallback backend's answer
    t.observe(entry(503, attempts=0))  # a direct response (circuit_open, static fallback, a denial)
    t.observe(entry(500, route="shop/no-breaker"))
    intermediate = entry(500)
    intermediate.common_properties.intermediate_log_entry = True
    t.observe(intermediate)
    periodic = entry(500)
    periodic.common_properties.access_log_type = accesslog_pb2.AccessLogType.DownstreamPeriodic
    t.observe(periodic)
    tagged = entry(200)
    tagged.response.response_headers["x-gatehouse-breaker"] = "open"
    t.observe(tagged)
    assert t.take() == []


def test_slow_is_the_total_duration_above_the_rule() -> None:
    t = tallies(["5xx"], slow_ms=100)
    t.observe(entry(200, total_ms=99))
    t.observe(entry(200, total_ms=150))
    t.observe(entry(500, total_ms=150))
    assert counts(t) == (3, 1, 2)


def test_calls_are_bucketed_by_start_time_and_taken_once() -> None:
    t = tallies()
    e = entry(500)
    t.observe(e)
    e.common_properties.start_time.nanos = 250_000_000
    t.observe(e)
    t.observe(e)
    taken = sorted(t.take(), key=lambda x: x["bucket"])
    assert taken == [
        {"route": ROUTE, "bucket": 1_767_225_600_100, "calls": 1, "failures": 1, "slow": 0},
        {"route": ROUTE, "bucket": 1_767_225_600_200, "calls": 2, "failures": 2, "slow": 0},
    ]
    assert t.take() == []


def test_new_rules_drop_the_counts_of_routes_that_lost_their_breaker() -> None:
    t = tallies()
    t.observe(entry(500))
    t.set_rules("v2", {})
    assert t.take() == [] and t.version == "v2"


async def test_a_full_buffer_drops_events_but_not_the_breaker_tallies() -> None:
    buffer = EventBuffer(max_events=1)
    t = tallies()
    server = grpc.aio.server()
    als_pb2_grpc.add_AccessLogServiceServicer_to_server(AccessLogService(buffer, t), server)
    address = f"127.0.0.1:{free_port()}"
    server.add_insecure_port(address)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = als_pb2_grpc.AccessLogServiceStub(channel)

            async def messages() -> AsyncIterator[als_pb2.StreamAccessLogsMessage]:
                for _ in range(5):
                    message = als_pb2.StreamAccessLogsMessage()
                    message.http_logs.log_entry.extend([entry(503), entry(200)])
                    yield message

            await asyncio.wait_for(stub.StreamAccessLogs(messages()), 5)
    finally:
        await server.stop(grace=None)
    assert len(buffer) == 1 and buffer.dropped == 9
    assert counts(t) == (10, 5, 0)


def test_bad_rules_from_the_control_plane_are_refused() -> None:
    t = tallies()
    bad: dict[str, Any] = {ROUTE: {"clusters": [CLUSTER]}}
    with pytest.raises(KeyError):
        t.set_rules("v9", bad)
    assert t.version == "v1", "the last good rules stay"
