"""Every service's /metrics, scraped before and after real traffic through real Envoy: the
metrics issue 8 lists move as that traffic says they must.

- control plane: connected Envoys, pushes and ACKs by type, a NACK by type, the
  change-to-push and push-to-ACK histograms;
- ext_authz: decisions by result and reason, token-cache lookups (hit ratio), JWKS fetches
  by result (against the JWKS server's own count), the revocation mirror's lag;
- ratelimit_svc: hits, over-limit and near-limit of one limit;
- telemetry: access events received and sent (against the sink's own lines), the drop
  counters; audit events spooled while Kafka is unreachable (on ext_authz, which emits them).

The exposition is parsed with prometheus_client's parser. Counts are exact where the traffic
fixes them (one Envoy, one ext_authz, nothing else calling them).
"""

from __future__ import annotations

import json
import math
import time
import urllib.request
from pathlib import Path

import jwt
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.harness.ext_authz import ExtAuthzProcess
from tests.harness.gateway import GatewayStack
from tests.harness.http_client import Reply, wait_for
from tests.harness.issuer import JwksServer, TestIssuer, forge_signature
from tests.harness.redis import RedisServer
from tests.harness.route_repo import route_doc
from tests.harness.telemetry import TelemetryServiceProcess
from tests.harness.window_clock import settle
from tests.integration.conftest import StackFactory, ext_authz_entry
from tests.integration.test_authz import authz_stack, bearer
from tests.integration.test_changes import route
from tests.integration.test_ratelimit_envoy import limited, start

SCRAPE_TIMEOUT = 5.0


class Scrape:
    """One /metrics response, parsed: samples by name, with their labels."""

    def __init__(self, text: str) -> None:
        self.families = {family.name: family for family in text_string_to_metric_families(text)}
        self.samples = [sample for family in self.families.values() for sample in family.samples]

    def matching(self, name: str, **labels: str) -> list[float]:
        return [s.value for s in self.samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]

    def value(self, name: str, **labels: str) -> float:
        """The sum of the samples named ``name`` whose labels include ``labels``; 0 if none."""
        return sum(self.matching(name, **labels))

    def present(self, name: str, **labels: str) -> bool:
        return bool(self.matching(name, **labels))

    def label_values(self, name: str, label: str) -> set[str]:
        return {s.labels[label] for s in self.samples if s.name == name and label in s.labels}


def scrape(url: str) -> Scrape:
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT) as response:
        assert response.status == 200
        return Scrape(response.read().decode())


def control_plane_metrics(stack: GatewayStack) -> Scrape:
    return scrape(f"{stack.control_plane.admin_url}/metrics")


def service_metrics(metrics_port: int) -> Scrape:
    return scrape(f"http://127.0.0.1:{metrics_port}/metrics")


def moved(before: Scrape, after: Scrape, name: str, **labels: str) -> float:
    return after.value(name, **labels) - before.value(name, **labels)


# --- control plane ------------------------------------------------------------------------------


def test_control_plane_counts_proxies_pushes_acks_nacks_and_their_latencies(make_stack: StackFactory, protocol: str) -> None:
    # Stricter regex limits in this Envoy than the control plane validates against: a valid
    # route is NACKed (see test_changes.test_envoy_nack_is_reported_with_its_message_and_route).
    stack = make_stack(delta=protocol == "delta", envoy_runtime={"re2.max_program_size.error_level": 5})
    stack.commit_routes({"a.yaml": [route("a", "/a", "svc-a")]})
    stack.start(wait_path="/a")
    first = control_plane_metrics(stack)
    assert first.value("gatehouse_xds_connected_proxies", protocol=protocol) == 1
    assert first.value("gatehouse_xds_connected_proxies") == 1, "one Envoy, no other ADS client"
    for kind in ("CDS", "LDS", "RDS", "EDS"):
        assert first.value("gatehouse_xds_pushes_total", type=kind) >= 1, kind
        assert first.value("gatehouse_xds_acks_total", type=kind) >= 1, kind
        assert first.value("gatehouse_xds_push_to_ack_seconds_count", type=kind) >= 1, kind
        assert first.value("gatehouse_xds_change_to_push_seconds_count", type=kind) >= 1, kind

    before = control_plane_metrics(stack)
    stack.commit_routes({"a.yaml": [route("a", "/a", "svc-b", rev="2")]}, "move /a")
    stack.control_plane.sync()
    stack.wait_upstream("/a", "svc-b")
    wait_for(lambda: moved(before, control_plane_metrics(stack), "gatehouse_xds_push_to_ack_seconds_count", type="RDS") >= 1,
             5, "the RDS push ACKed and timed")
    after = control_plane_metrics(stack)
    assert moved(before, after, "gatehouse_xds_pushes_total", type="RDS") >= 1
    assert moved(before, after, "gatehouse_xds_acks_total", type="RDS") >= 1
    assert moved(before, after, "gatehouse_xds_change_to_push_seconds_count", type="RDS") >= 1
    assert 0 < moved(before, after, "gatehouse_xds_change_to_push_seconds_sum", type="RDS") < 5
    assert 0 < moved(before, after, "gatehouse_xds_push_to_ack_seconds_sum", type="RDS") < 5
    assert moved(before, after, "gatehouse_xds_nacks_total") == 0, "nothing was refused yet"
    assert moved(before, after, "gatehouse_source_syncs_total", source="routes", result="applied") >= 1

    refused = control_plane_metrics(stack)
    huge = route_doc("huge", {"match": {"pathRegex": "/(orders|invoices)/[0-9]{4}"}, "backends": [{"service": "svc-a", "port": 8080}],
                              "auth": {"required": False}})
    stack.commit_routes({"huge.yaml": [huge]}, "an over-complex regex")
    stack.control_plane.sync()
    wait_for(lambda: moved(refused, control_plane_metrics(stack), "gatehouse_xds_nacks_total", type="RDS") >= 1, 10,
             "an RDS NACK counted")
    nacked = control_plane_metrics(stack)
    assert moved(refused, nacked, "gatehouse_xds_pushes_total", type="RDS") >= 1
    assert moved(refused, nacked, "gatehouse_xds_nacks_total", type="CDS") == 0, "counted by type"
    assert moved(refused, nacked, "gatehouse_xds_acks_total", type="RDS") == 0, "the NACKed push is no ACK"
    assert nacked.value("gatehouse_xds_connected_proxies") == 1


# --- ext_authz ----------------------------------------------------------------------------------


def _unknown_kid_token(issuer: TestIssuer) -> str:
    claims = {"iss": issuer.issuer, "aud": issuer.audience, "sub": "x", "exp": int(time.time()) + 60, "jti": "unknown-kid"}
    return jwt.encode(claims, issuer.keys[issuer.active_kid], algorithm="RS256", headers={"kid": "not-published"})


@pytest.mark.redis
def test_ext_authz_counts_decisions_cache_lookups_jwks_fetches_and_mirror_lag(
    make_stack: StackFactory, tmp_path: Path, redis: RedisServer  # noqa: F811 - fixture
) -> None:
    issuer = TestIssuer()
    jwks = JwksServer(issuer, max_age=3600).start()
    try:
        stack, [authz] = authz_stack(make_stack, tmp_path, issuer, redis,
                                     jwks={"jwksUrl": jwks.url, "jwks": {"unknownKidCooldown": "1s"}})
        try:
            run_ext_authz_traffic(stack, authz, issuer, jwks)
        finally:
            authz.stop()
    finally:
        jwks.stop()


def run_ext_authz_traffic(stack: GatewayStack, authz: ExtAuthzProcess, issuer: TestIssuer, jwks: JwksServer) -> None:
    name = issuer.issuer
    before = service_metrics(authz.metrics_port)
    fetched_before = jwks.fetches

    token = issuer.token("alice", scope="orders:read")
    forged = forge_signature(issuer.token("mallory", scope="orders:read"))
    client = stack.client()

    def status(headers: dict[str, str]) -> int:
        reply: Reply = client.request("/orders/1", headers=headers)
        return reply.status

    assert [status(bearer(token)) for _ in range(4)] == [200] * 4  # 1 miss, then 3 hits
    assert status({}) == 401  # missing: no token, no lookup
    assert status(bearer(issuer.token("alice", ttl=-120, scope="orders:read"))) == 401  # expired: a miss
    assert [status(bearer(forged)) for _ in range(2)] == [401, 401]  # a miss, then a remembered failure
    assert status(bearer(issuer.token("bob", scope="catalog:read"))) == 403  # verified (a miss), then scope
    assert status(bearer(_unknown_kid_token(issuer))) == 401  # a miss and one JWKS refetch

    after = service_metrics(authz.metrics_port)
    decisions = {
        (result, reason): moved(before, after, "gatehouse_authz_decisions_total", result=result, reason=reason)
        for result, reason in [("allow", "ok"), ("deny", "missing"), ("deny", "expired"), ("deny", "bad_signature"),
                               ("deny", "scope"), ("deny", "unknown_kid")]
    }
    assert decisions == {("allow", "ok"): 4, ("deny", "missing"): 1, ("deny", "expired"): 1, ("deny", "bad_signature"): 2,
                         ("deny", "scope"): 1, ("deny", "unknown_kid"): 1}
    assert moved(before, after, "gatehouse_authz_decisions_total") == 10, "nothing else was decided"

    lookups = {r: moved(before, after, "gatehouse_authz_token_cache_lookups_total", result=r) for r in ("hit", "failure_hit", "miss")}
    assert lookups == {"hit": 3, "failure_hit": 1, "miss": 5}
    assert lookups["hit"] / sum(lookups.values()) == pytest.approx(3 / 9), "the documented hit ratio"
    assert after.value("gatehouse_authz_token_cache_entries") >= 2  # alice's and bob's verified tokens

    fetched = jwks.fetches - fetched_before
    assert fetched == 1, "the unknown kid cost exactly one fetch"
    assert moved(before, after, "gatehouse_authz_jwks_fetches_total", issuer=name, result="ok") == fetched
    assert moved(before, after, "gatehouse_authz_jwks_fetches_total", issuer=name, result="error") == 0
    assert moved(before, after, "gatehouse_authz_jwks_unknown_kid_refetches_total", issuer=name) == 1
    assert moved(before, after, "gatehouse_authz_jwks_fetch_duration_seconds_count", issuer=name) == 1
    assert after.value("gatehouse_authz_jwks_fetches_total", issuer=name) == jwks.fetches, "every fetch the server saw"
    assert after.value("gatehouse_jwks_keys_usable", issuer=name) == 1
    assert after.label_values("gatehouse_authz_jwks_fetches_total", "issuer") == {name}, "issuer labels from config only"

    assert after.present("gatehouse_revocation_mirror_lag_seconds")
    lag = after.value("gatehouse_revocation_mirror_lag_seconds")
    assert not math.isnan(lag) and 0 <= lag < 5, lag
    assert after.value("gatehouse_revocation_mirror_state", state="in_sync") == 1


# --- ratelimit_svc ------------------------------------------------------------------------------


@pytest.mark.redis
def test_ratelimit_counts_hits_over_limit_and_near_limit(make_stack: StackFactory, tmp_path: Path, redis: RedisServer) -> None:  # noqa: F811
    probe = {"key": "header:x-probe", "algorithm": "fixedWindow", "limit": 3, "window": "60s"}
    stack = start(make_stack, tmp_path, redis, [limited("orders", "/orders", [probe])])
    limit = "default/orders#0"  # control_plane/translator/ratelimit.py: limit_id(route, index)
    try:
        gw = stack.gateway
        wait_for(lambda: gw.get("/orders", headers={"x-probe": "warm-up"}).headers.get("x-ratelimit-limit") == "3", 10,
                 "the limit in force")
        before = service_metrics(stack.ratelimit.metrics_port)
        settle(60, 3)  # the counted hits in one fixed window
        statuses = [gw.get("/orders", headers={"x-probe": "counted"}).status for _ in range(5)]
        assert statuses == [200, 200, 200, 429, 429]
        after = service_metrics(stack.ratelimit.metrics_port)
        assert moved(before, after, "gatehouse_ratelimit_hits_total", limit=limit) == 5
        assert moved(before, after, "gatehouse_ratelimit_over_limit_total", limit=limit) == 2
        assert moved(before, after, "gatehouse_ratelimit_near_limit_total", limit=limit) == 1, "the hit that left 0 of 3"
        assert moved(before, after, "gatehouse_ratelimit_redis_calls_total", limit=limit, op="hit") == 5
        assert moved(before, after, "gatehouse_ratelimit_redis_errors_total") == 0
        assert after.value("gatehouse_ratelimit_fallback_active", limit=limit) == 0
        assert after.value("gatehouse_ratelimit_circuit_state", state="closed") == 1
        assert after.label_values("gatehouse_ratelimit_hits_total", "limit") == {limit}, "limit ids from config only"
    finally:
        stack.stop()


# --- telemetry ----------------------------------------------------------------------------------


def test_telemetry_counts_access_events_sent_and_dropped_and_audit_events_spooled(
    make_stack: StackFactory, tmp_path: Path, refused_address: str
) -> None:
    issuer = TestIssuer()
    output = tmp_path / "telemetry" / "access.jsonl"
    telemetry = TelemetryServiceProcess(tmp_path / "telemetry", sink={"file": {"path": str(output)}}).start()
    unreachable = refused_address  # nothing listens: audit events must go to the spool
    authz = ExtAuthzProcess(tmp_path / "authz", {
        "issuers": [{"issuer": issuer.issuer, "audiences": [issuer.audience], "jwksFile": str(issuer.write_jwks(tmp_path / "jwks.json"))}],
        "audit": {"kafka": {"bootstrapServers": [unreachable], "requestTimeout": "1s", "retryBackoff": "200ms"},
                  "spoolDir": str(tmp_path / "authz-spool")},
    }, transport="http")
    try:
        gw = make_stack(control_plane_extra={
            "extAuthz": ext_authz_entry([authz]),
            "accessLog": {"address": telemetry.address, "bufferSize": 0, "flushInterval": "100ms"},
        })
        gw.commit_routes({"routes.yaml": [
            route_doc("orders", {"match": {"pathPrefix": "/orders"}, "backends": [{"service": "svc-a", "port": 8080}]}),
            route_doc("open", {"match": {"pathPrefix": "/open"}, "backends": [{"service": "svc-b", "port": 8080}],
                               "auth": {"required": False}}),
        ]})
        gw.start(wait_path="/open/warm")
        authz.use_control_plane(gw.control_plane.xds_port)
        authz.start()
        # Envoy streams entries in order: once this one is written, the warm-up's are all in,
        # and the window below counts only the requests sent in it.
        assert gw.get("/open/sentinel", headers={"x-request-id": "scrape-sentinel"}).status == 200
        wait_for(lambda: "scrape-sentinel" in _written(output) and _settled(telemetry), 10, "the warm-up's events through")
        before, authz_before = service_metrics(telemetry.metrics_port), service_metrics(authz.metrics_port)

        n = 12
        alice = bearer(issuer.token("alice"))
        replies = [gw.get(f"/orders/{i}", headers={**alice, "x-request-id": f"scrape-{i}"}) for i in range(n)]
        assert [r.status for r in replies] == [200] * n
        assert gw.get("/orders/denied", headers={"x-request-id": "scrape-denied"}).status == 401

        def delta(name: str, **labels: str) -> float:
            return moved(before, service_metrics(telemetry.metrics_port), name, **labels)

        wait_for(lambda: delta("gatehouse_telemetry_access_sent_total") >= n + 1, 10, f"{n + 1} access events sent")
        after = service_metrics(telemetry.metrics_port)
        assert moved(before, after, "gatehouse_telemetry_access_received_total") == n + 1
        assert moved(before, after, "gatehouse_telemetry_access_sent_total") == n + 1
        written = [json.loads(line) for line in _written(output).splitlines()]
        ours = {e["request_id"]: e["status"] for e in written if str(e.get("request_id")).startswith("scrape-")}
        ours.pop("scrape-sentinel")
        assert ours == {**{f"scrape-{i}": 200 for i in range(n)}, "scrape-denied": 401}, "one line per event counted"
        assert after.label_values("gatehouse_telemetry_access_dropped_total", "reason") == {"buffer_full", "sink_error", "invalid"}
        assert moved(before, after, "gatehouse_telemetry_access_dropped_total") == 0
        assert after.present("gatehouse_telemetry_access_buffered")
        assert after.present("gatehouse_telemetry_audit_spooled_total")

        # The denial's audit event, on ext_authz (the process that emits audit events).
        def spooled() -> float:
            return moved(authz_before, service_metrics(authz.metrics_port), "gatehouse_telemetry_audit_spooled_total")

        wait_for(lambda: spooled() >= 1, 15, "the denial's audit event spooled while Kafka is unreachable")
        authz_after = service_metrics(authz.metrics_port)
        assert authz_after.value("gatehouse_telemetry_audit_spooling") == 1
        assert authz_after.value("gatehouse_telemetry_audit_spool_bytes") > 0
        assert moved(authz_before, authz_after, "gatehouse_telemetry_kafka_errors_total", sink="audit") >= 1
        assert moved(authz_before, authz_after, "gatehouse_telemetry_audit_sent_total") == 0
        assert moved(authz_before, authz_after, "gatehouse_telemetry_audit_dropped_total") == 0, "spooled, not lost"
    finally:
        authz.stop()
        telemetry.stop()


def _written(output: Path) -> str:
    return output.read_text() if output.exists() else ""


def _settled(telemetry: TelemetryServiceProcess) -> bool:
    now = service_metrics(telemetry.metrics_port)
    received = now.value("gatehouse_telemetry_access_received_total")
    return received > 0 and received == now.value("gatehouse_telemetry_access_sent_total") + now.value(
        "gatehouse_telemetry_access_dropped_total"
    )
