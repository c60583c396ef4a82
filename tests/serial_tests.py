"""Which tests run in the serial phase of ``make test``, alone on the machine, and why.

``make test`` runs everything else first on parallel pytest-xdist workers (docs/testing.md).
A test belongs here when what it asserts depends on the machine not being shared:

- ``EXCLUSIVE``: it owns something machine-wide. The real cluster's tests compare the
  machine's own network namespace (links, routes, iptables) before and after, and every
  other worker's test network adds veth links there while it runs.
- ``WALL_CLOCK``: it bounds how long the product takes (a change served within a second,
  a revocation within a second, breaker and load-shedding timings, a latency percentile).
  On 2 cores shared with several workers those bounds would measure the other workers.
  The bounds stay as they are; the tests get the machine to themselves instead.
- ``WINDOWS``: it counts admissions against a fixed rate-limit window after
  ``window_clock.settle``, which waits until the window has enough time left for the
  test's hits; on a loaded machine the hits may take longer than that margin.

An entry is a file (every test in it) or a ``file::test`` prefix (that test, each of its
parameters). Anything not listed runs in parallel and must not depend on timing: a test
that waits for an event waits for the event, with a generous timeout.
"""

from __future__ import annotations

EXCLUSIVE = (
    "tests/e2e/cluster/",
)

WALL_CLOCK = (
    "tests/e2e/test_api_keys_kubernetes.py",
    "tests/e2e/test_breaker_replicas.py",
    "tests/e2e/test_kubernetes_routes.py",
    "tests/e2e/test_route_status_replicas.py",
    "tests/e2e/test_dev_stack.py",
    "tests/integration/test_api_keys_envoy.py",
    "tests/integration/test_authz.py",
    "tests/integration/test_breaker_envoy.py",
    "tests/integration/test_breaker_detection.py",
    "tests/integration/test_breaker_half_open_fallback.py",
    "tests/integration/test_changes.py",
    "tests/integration/test_endpoints_fast_path.py",
    "tests/integration/test_ext_authz_workers.py",
    "tests/integration/test_http_check_upstream_token.py",
    "tests/integration/test_jwks_fetch.py",
    "tests/integration/test_load_shedding_envoy.py",
    "tests/integration/test_back_pressure_envoy.py",
    "tests/integration/test_metrics_scrape.py",
    "tests/integration/test_mixed_commits.py",
    "tests/integration/test_resilience_envoy.py",
    "tests/integration/test_revocation.py",
    "tests/integration/test_waiting_room_check.py",
    "tests/integration/test_waiting_room_envoy.py",
)

WINDOWS = (
    "tests/integration/test_ratelimit_envoy.py",
    "tests/integration/test_ratelimit_store.py",
    "tests/integration/test_ratelimit_cluster.py",
    "tests/integration/test_gateway_errors_envoy.py",
    "tests/integration/test_principals_envoy.py",
    "tests/integration/test_http_check_limits.py",
)

SERIAL = EXCLUSIVE + WALL_CLOCK + WINDOWS


def is_serial(nodeid: str) -> bool:
    return nodeid.startswith(SERIAL)
