"""The harness starts real Redis, upstreams and Envoy, and stops them again.

If this file fails, every other integration test's failure is suspect, so it
checks the harness itself against the real binaries.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.envoy import EnvoyProcess, envoy_binary, validate_config, write_bootstrap
from tests.harness.ports import free_port
from tests.harness.redis import RedisServer
from tests.harness.upstream import EchoUpstream


def http_get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()


def static_bootstrap(*, admin_port: int, listener_port: int, upstream_port: int) -> dict[str, Any]:
    """Smallest useful gateway: one listener, route `/` to one static cluster."""
    return {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin_port}}},
        "static_resources": {
            "listeners": [
                {
                    "name": "ingress",
                    "address": {"socket_address": {"address": "127.0.0.1", "port_value": listener_port}},
                    "filter_chains": [
                        {
                            "filters": [
                                {
                                    "name": "envoy.filters.network.http_connection_manager",
                                    "typed_config": {
                                        "@type": "type.googleapis.com/envoy.extensions.filters.network."
                                        "http_connection_manager.v3.HttpConnectionManager",
                                        "stat_prefix": "ingress",
                                        "route_config": {
                                            "name": "local",
                                            "virtual_hosts": [
                                                {
                                                    "name": "all",
                                                    "domains": ["*"],
                                                    "routes": [
                                                        {"match": {"prefix": "/"}, "route": {"cluster": "echo"}}
                                                    ],
                                                }
                                            ],
                                        },
                                        "http_filters": [
                                            {
                                                "name": "envoy.filters.http.router",
                                                "typed_config": {
                                                    "@type": "type.googleapis.com/envoy.extensions.filters."
                                                    "http.router.v3.Router"
                                                },
                                            }
                                        ],
                                    },
                                }
                            ]
                        }
                    ],
                }
            ],
            "clusters": [
                {
                    "name": "echo",
                    "type": "STATIC",
                    "connect_timeout": "1s",
                    "load_assignment": {
                        "cluster_name": "echo",
                        "endpoints": [
                            {
                                "lb_endpoints": [
                                    {
                                        "endpoint": {
                                            "address": {
                                                "socket_address": {
                                                    "address": "127.0.0.1",
                                                    "port_value": upstream_port,
                                                }
                                            }
                                        }
                                    }
                                ]
                            }
                        ],
                    },
                }
            ],
        },
    }


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer.start(log_dir=tmp_path)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def upstreams(tmp_path: Path) -> Iterator[list[EchoUpstream]]:
    started: list[EchoUpstream] = []
    try:
        for name in ("order-service", "user-service"):
            started.append(EchoUpstream.start(name, log_dir=tmp_path))
        yield started
    finally:
        for upstream in started:
            upstream.stop()


@pytest.mark.redis
def test_redis_answers_ping_and_restarts_on_same_port(redis_server: RedisServer) -> None:
    with socket.create_connection(("127.0.0.1", redis_server.port), timeout=2) as sock:
        sock.sendall(b"*1\r\n$4\r\nPING\r\n")
        assert sock.recv(64) == b"+PONG\r\n"
    assert redis_server.url == f"redis://127.0.0.1:{redis_server.port}/0"

    first_pid = redis_server.pid
    redis_server.kill()
    assert not redis_server.ping()
    redis_server.restart()
    assert redis_server.pid != first_pid
    assert redis_server.ping()


def test_echo_upstreams_answer_with_their_name(upstreams: list[EchoUpstream]) -> None:
    for upstream in upstreams:
        status, headers, body = http_get(f"{upstream.url}/api/v1/things?x=1", {"X-Client": "smoke"})
        assert status == 200
        assert headers["x-upstream"] == upstream.name
        payload = json.loads(body)
        assert payload["upstream"] == upstream.name
        assert payload["method"] == "GET"
        assert payload["path"] == "/api/v1/things?x=1"
        assert payload["headers"]["x-client"] == "smoke"
    assert upstreams[0].port != upstreams[1].port


def test_echo_upstream_status_and_health(upstreams: list[EchoUpstream]) -> None:
    upstream = upstreams[0]
    status, _, body = http_get(f"{upstream.url}/health")
    assert (status, body) == (200, b"ok")
    with pytest.raises(urllib.error.HTTPError) as excinfo:
        http_get(f"{upstream.url}/fail?status=503")
    assert excinfo.value.code == 503
    assert excinfo.value.headers["x-upstream"] == upstream.name


@pytest.mark.envoy
def test_envoy_routes_to_static_upstream(tmp_path: Path, upstreams: list[EchoUpstream]) -> None:
    admin_port, listener_port = free_port(), free_port()
    target = upstreams[0]
    bootstrap = static_bootstrap(
        admin_port=admin_port, listener_port=listener_port, upstream_port=target.port
    )
    envoy = EnvoyProcess.start(bootstrap, log_dir=tmp_path, admin_port=admin_port)
    try:
        envoy.wait_live(timeout=30)
        assert envoy.ready()

        status, headers, body = http_get(f"http://127.0.0.1:{listener_port}/orders/42?q=1")
        assert status == 200
        assert headers["x-upstream"] == target.name
        payload = json.loads(body)
        assert payload["path"] == "/orders/42?q=1"
        assert "x-envoy-expected-rq-timeout-ms" in payload["headers"]

        info = envoy.server_info()
        assert info["state"] == "LIVE"
        assert info["command_line_options"]["restart_epoch"] == 0
        assert int(info["command_line_options"]["base_id"]) == envoy.base_id

        stats = envoy.stats(filter=r"^cluster\.echo\.upstream_rq_total$")
        assert stats == {"cluster.echo.upstream_rq_total": 1}
        clusters = envoy.config_dump("static_clusters")
        names = [c["cluster"]["name"] for c in clusters["configs"]]
        assert names == ["echo"]
    finally:
        envoy.stop()
    assert not envoy.alive()
    assert not envoy.ready()


@pytest.mark.envoy
def test_validate_config_accepts_good_and_rejects_broken_bootstrap(tmp_path: Path) -> None:
    envoy_bin = envoy_binary()
    good = static_bootstrap(admin_port=free_port(), listener_port=free_port(), upstream_port=free_port())
    good_path = write_bootstrap(good, tmp_path / "good.yaml")
    result = validate_config(envoy_bin, good_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK" in result.stdout + result.stderr

    broken = static_bootstrap(admin_port=free_port(), listener_port=free_port(), upstream_port=free_port())
    broken["static_resources"]["clusters"][0]["name"] = "not-echo"
    broken_path = write_bootstrap(broken, tmp_path / "broken.yaml")
    result = validate_config(envoy_bin, broken_path)
    assert result.returncode != 0
    assert "unknown cluster 'echo'" in result.stdout + result.stderr
