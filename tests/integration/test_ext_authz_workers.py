"""``workers: 3`` through real Envoy: one port, three processes, a supervisor over them.

A killed worker costs at most the checks in flight on its connections and is started
again; revocation reaches every worker's mirror within a second; a hybrid limit shared by
the workers admits no more than its limit (each worker is one instance of the bound in
docs/ratelimit.md).
"""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.harness.ext_authz import REPO_ROOT, ExtAuthzProcess
from tests.harness.gateway import GatewayStack
from tests.harness.http_client import wait_for
from tests.harness.issuer import TestIssuer
from tests.harness.redis import RedisServer
from tests.harness.route_repo import route_doc
from tests.harness.service import sample_total
from tests.harness.window_clock import settle
from tests.integration.conftest import StackFactory, ext_authz_entry

WORKERS = 3
CLIENTS = 4


def worker_pids(supervisor: int) -> list[int]:
    """The supervisor's children (spawned from its worker threads: every task's list)."""
    pids = []
    for task in os.listdir(f"/proc/{supervisor}/task"):
        with open(f"/proc/{supervisor}/task/{task}/children") as children:
            pids += [int(pid) for pid in children.read().split()]
    return pids


def start(make_stack: StackFactory, tmp_path: Path, redis: RedisServer, issuer: TestIssuer, limits: list[dict[str, Any]]) -> tuple[GatewayStack, ExtAuthzProcess]:
    jwks = str(issuer.write_jwks(tmp_path / "jwks.json"))
    config = {
        "issuers": [{"issuer": issuer.issuer, "audiences": [issuer.audience], "jwksFile": jwks}],
        "revocation": {"redisUrl": redis.url, "resyncInterval": "2s"},
        "workers": WORKERS,
    }
    rate_limit = {"redis": {"url": redis.url, "timeout": "200ms"}, "expectedInstances": WORKERS, "hybrid": {"maxBatch": 4}}
    authz = ExtAuthzProcess(tmp_path / "authz", config, transport="http", rate_limit=rate_limit)
    gateway = make_stack(control_plane_extra={"extAuthz": ext_authz_entry([authz]), "rateLimit": {"address": "127.0.0.1:1"}})
    route = {"match": {"pathPrefix": "/orders"}, "backends": [{"service": "svc-a", "port": 8080}], "rateLimits": limits}
    gateway.commit_routes({"routes.yaml": [route_doc("orders", route), route_doc("open", {"match": {"pathPrefix": "/open"}, "backends": [{"service": "svc-b", "port": 8080}], "auth": {"required": False}})]})
    gateway.start(wait_path="/open")
    authz.use_control_plane(gateway.control_plane.xds_port)
    authz.start(timeout=60)
    return gateway, authz


def hammer(port: int, token: str, stop: threading.Event, statuses: Counter[int], lock: threading.Lock) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    while not stop.is_set():
        try:
            connection.request("GET", "/orders/1", headers={"authorization": f"Bearer {token}"})
            response = connection.getresponse()
            response.read()
            status = response.status
        except (OSError, http.client.HTTPException):
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            status = 0
        with lock:
            statuses[status] += 1
    connection.close()


@pytest.mark.redis
def test_one_worker_killed_the_others_keep_serving_and_it_comes_back(make_stack: StackFactory, tmp_path: Path, redis: RedisServer) -> None:
    issuer = TestIssuer()
    gateway, authz = start(make_stack, tmp_path, redis, issuer, [])
    try:
        assert authz.process is not None
        pids = worker_pids(authz.process.pid)
        assert len(pids) == WORKERS
        metrics = authz.metrics_text()
        assert {f'worker="{i}"' for i in range(WORKERS)} <= {part for part in metrics.replace("{", ",").replace("}", ",").split(",") if part.startswith("worker=")}
        token = issuer.token("alice")
        stop, lock, statuses = threading.Event(), threading.Lock(), Counter[int]()
        clients = [threading.Thread(target=hammer, args=(gateway.listener_port, token, stop, statuses, lock)) for _ in range(CLIENTS)]
        for client in clients:
            client.start()
        time.sleep(1.0)
        with lock:
            before = Counter(statuses)
        os.kill(pids[0], signal.SIGKILL)
        time.sleep(2.0)
        stop.set()
        for client in clients:
            client.join(10)
        after = statuses - before
        assert before[200] > 50 and set(before) == {200}, before
        # Envoy's checks in flight on the killed worker's connections fail (503
        # authorization_unavailable); every other request is served.
        assert after[200] > 50, after
        assert after[503] <= CLIENTS and set(after) <= {200, 503}, after
        wait_for(lambda: len(worker_pids(authz.process.pid)) == WORKERS, 15, "the supervisor starting the worker again")  # type: ignore[union-attr]
        wait_for(lambda: authz.ready(), 30, "the restarted worker ready")
        assert authz.metric("gatehouse_worker_restarts_total") == 1
        assert gateway.get("/orders/1", headers={"authorization": f"Bearer {token}"}).status == 200
    finally:
        authz.stop()


@pytest.mark.redis
def test_revocation_reaches_every_worker_within_a_second(make_stack: StackFactory, tmp_path: Path, redis: RedisServer) -> None:
    issuer = TestIssuer()
    gateway, authz = start(make_stack, tmp_path, redis, issuer, [])
    try:
        token = issuer.token("mallory", jti="worker-jti")
        assert gateway.get("/orders/1", headers={"authorization": f"Bearer {token}"}).status == 200
        # Any worker takes the admin call (the port is shared); every mirror follows Redis.
        result = subprocess.run(
            [sys.executable, "-m", "gatehouse", "revoke", "--admin", f"127.0.0.1:{authz.admin_port}", "--jti", "worker-jti", "--ttl", "1h"],
            env=authz.admin_env(), capture_output=True, text=True, timeout=30, cwd=REPO_ROOT,
        )
        assert result.returncode == 0, result.stderr
        revoked_at = time.monotonic()  # the revocation is in Redis once the admin call returned

        def every_mirror_applied_it() -> bool:
            text = authz.metrics_text()  # one scrape a poll: each merges every worker's
            return all(sample_total(text, "gatehouse_revocation_messages_total", worker=str(i)) >= 1 for i in range(WORKERS))

        wait_for(every_mirror_applied_it, 5, "every worker's mirror applying the revocation", interval=0.02)
        assert time.monotonic() - revoked_at < 1.0, "within a second of the admin call returning"
        assert {gateway.get("/orders/1", headers={"authorization": f"Bearer {token}"}).status for _ in range(30)} == {401}
    finally:
        authz.stop()


@pytest.mark.redis
def test_a_hybrid_limit_shared_by_the_workers_admits_at_most_its_limit(make_stack: StackFactory, tmp_path: Path, redis: RedisServer) -> None:
    issuer = TestIssuer()
    limit = 20
    gateway, authz = start(
        make_stack, tmp_path, redis, issuer, [{"key": "user", "algorithm": "fixedWindow", "limit": limit, "window": "1h", "mode": "hybrid"}]
    )
    try:
        token = issuer.token("alice")
        settle(3600, 10)  # 2 s of traffic within one window: the next one admits the limit again
        stop, lock, statuses = threading.Event(), threading.Lock(), Counter[int]()
        clients = [threading.Thread(target=hammer, args=(gateway.listener_port, token, stop, statuses, lock)) for _ in range(CLIENTS)]
        for client in clients:
            client.start()
        time.sleep(2.0)
        stop.set()
        for client in clients:
            client.join(10)
        assert statuses[429] > 0, statuses
        # fixedWindow's hybrid bound is 0 over the limit, whatever the number of instances;
        # tokens held by the other workers may leave it under (the documented under-admission).
        assert 0 < statuses[200] <= limit, statuses
    finally:
        authz.stop()
