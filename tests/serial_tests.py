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

An entry is a file (every test in it) or ``file::test`` (that test, each of its
parameters): a file only where most of its tests are timing-bound, since the rest of a
module need not wait for the serial phase. Anything not listed runs in parallel and must
not depend on timing: a test that waits for an event waits for the event, with a
generous timeout.
"""

from __future__ import annotations

EXCLUSIVE = (
    "tests/e2e/cluster/",
)

WALL_CLOCK = (
    "tests/e2e/test_api_keys_kubernetes.py::test_a_secret_applied_is_a_key_and_deleting_it_refuses_the_key_within_a_second",
    "tests/e2e/test_breaker_replicas.py::test_an_operator_move_on_either_replica_reaches_both_envoys_within_a_second",
    "tests/e2e/test_kubernetes_routes.py::test_apply_a_route_and_envoy_serves_it_then_endpoints_follow_slices",
    "tests/e2e/test_kubernetes_routes.py::test_cross_namespace_backends_need_a_reference_grant",
    "tests/e2e/test_route_status_replicas.py::test_programmed_true_within_two_seconds_of_an_ack_from_the_non_leaders_envoy",
    "tests/e2e/test_dev_stack.py::test_dev_started_from_a_script_stops_everything_on_sigint_or_sigterm",
    "tests/integration/test_api_keys_envoy.py::test_a_key_is_created_used_on_both_instances_and_revoked_everywhere_within_a_second",
    "tests/integration/test_authz.py::test_a_revoked_token_is_refused_within_a_second_on_two_instances",
    "tests/integration/test_breaker_envoy.py::test_open_answers_circuit_open_without_the_upstream_then_close_proxies_again",
    "tests/integration/test_breaker_envoy.py::test_two_envoys_on_one_control_plane_follow_an_operator_open_and_close_within_a_second",
    "tests/integration/test_breaker_detection.py::test_error_rate_opens_after_minimum_calls_half_opens_and_probes_close_it",
    "tests/integration/test_breaker_detection.py::test_slow_calls_open_a_slow_call_rule_and_not_an_error_rule",
    "tests/integration/test_breaker_half_open_fallback.py",
    "tests/integration/test_back_pressure_envoy.py",
    "tests/integration/test_changes.py::test_commit_is_served_within_a_second_without_restart",
    "tests/integration/test_endpoints_fast_path.py::test_new_endpoint_is_served_fast_with_10k_routes_and_no_route_push",
    "tests/integration/test_ext_authz_workers.py::test_revocation_reaches_every_worker_within_a_second",
    "tests/integration/test_http_check_upstream_token.py::test_an_exchange_slower_than_its_timeout_is_the_documented_424_in_time",
    "tests/integration/test_jwks_fetch.py::test_a_failed_fetch_keeps_the_good_keys",
    "tests/integration/test_load_shedding_envoy.py",
    "tests/integration/test_metrics_scrape.py::test_ratelimit_counts_hits_over_limit_and_near_limit",
    "tests/integration/test_mixed_commits.py",
    "tests/integration/test_resilience_envoy.py::test_a_failing_host_is_ejected_and_returns_after_the_ejection_time",
    "tests/integration/test_resilience_envoy.py::test_a_saturated_bulkhead_sheds_fast_while_another_service_keeps_its_latency",
    "tests/integration/test_revocation.py::test_a_revocation_reaches_a_second_mirror_within_one_second",
    "tests/integration/test_revocation.py::test_writes_fail_fast_while_redis_is_down",
    "tests/integration/test_revocation.py::test_cli_errors_are_clear",
    "tests/integration/test_waiting_room_check.py::test_turns_come_strictly_in_ticket_order_whatever_order_clients_return_in",
    "tests/integration/test_waiting_room_check.py::test_a_client_that_missed_its_turn_takes_the_next_one",
    "tests/integration/test_waiting_room_check.py::test_no_second_admits_more_than_two_seconds_worth_whatever_clients_do",
    "tests/integration/test_waiting_room_envoy.py",
)

WINDOWS = (
    "tests/integration/test_api_keys_envoy.py::test_limits_count_per_consumer_and_bad_keys_get_401",
    "tests/integration/test_ext_authz_workers.py::test_a_hybrid_limit_shared_by_the_workers_admits_at_most_its_limit",
    "tests/integration/test_gateway_errors_envoy.py::test_a_rate_limited_request_is_a_json_429_that_keeps_the_rate_limit_headers",
    "tests/integration/test_principals_envoy.py::test_user_limits_count_per_principal_never_per_bare_id",
    "tests/integration/test_http_check_limits.py",
    "tests/integration/test_ratelimit_envoy.py",
    "tests/integration/test_ratelimit_store.py",
    "tests/integration/test_ratelimit_cluster.py",
)

SERIAL = EXCLUSIVE + WALL_CLOCK + WINDOWS
_FILES = tuple(entry for entry in SERIAL if "::" not in entry)
_TESTS = frozenset(entry for entry in SERIAL if "::" in entry)


def is_serial(nodeid: str) -> bool:
    """``nodeid``'s file is listed, or its test function is (any of its parameters)."""
    return nodeid.startswith(_FILES) or nodeid.split("[", 1)[0] in _TESTS
