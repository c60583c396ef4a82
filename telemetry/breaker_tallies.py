"""Route breakers' evidence: each access-log entry of a breaker route, sorted into call,
failure and slow as it arrives, before the Kafka buffer.

This runs in the ALS handler ahead of ``EventBuffer.offer``, so an event the buffer drops
under Kafka back-pressure has been counted already: the breakers never starve because a
log pipeline is slow. Counts are kept per (route, ``BUCKET_MS`` bucket of the request's
start time) and taken by ``breaker_flush.TallyFlusher`` every ~200 ms.

Envoy's connection manager logs one entry per downstream request, however many times the
router retried it (``upstream_request_attempt_count`` says how many), so a request retried
three times is one call. An entry counts only if it reached the router for one of the
route's primary clusters: ``upstream_cluster`` is one of them (a fallback backend's
cluster never is) and an upstream attempt was made or failed to be made (``attempts >= 1``
or the no-healthy-upstream / connect-failure flags); a direct response (a fallback, the
``circuit_open`` answer, a denial before the router) never counts, nor does an answer
carrying the fallback header ``x-gatehouse-breaker``. Periodic and
intermediate entries are skipped.

What is a failure follows the route's ``failOn`` (rules come from the control plane):
``5xx`` a status of 500 or more; ``reset`` the UR, UC and UPE flags; ``timeout`` UT, UMSDR
or status 504; ``connect-failure`` UF and UH; a number, that status. Slow: the request's
duration as Envoy logs it (to the last byte sent downstream) above ``slowCallMs``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from envoy.data.accesslog.v3 import accesslog_pb2

from telemetry import metrics

BUCKET_MS = 100
FALLBACK_HEADER = "x-gatehouse-breaker"
"""Set by the translator on a breaker's fallback answers; logged when the access log lists it."""
_FINAL_TYPES = frozenset({accesslog_pb2.AccessLogType.NotSet, accesslog_pb2.AccessLogType.DownstreamEnd})
_FAILURE_FLAGS = {
    "reset": ("upstream_remote_reset", "upstream_connection_termination", "upstream_protocol_error"),
    "timeout": ("upstream_request_timeout", "upstream_max_stream_duration_reached"),
    "connect-failure": ("upstream_connection_failure", "no_healthy_upstream"),
}
_NO_ATTEMPT_FLAGS = ("no_healthy_upstream", "upstream_connection_failure", "upstream_overflow")
"""Flags of a request the router handled even though no attempt was counted."""


@dataclass(frozen=True, slots=True)
class TallyRule:
    clusters: frozenset[str]
    any_5xx: bool
    statuses: frozenset[int]
    flags: tuple[str, ...]
    slow_ns: int | None

    @classmethod
    def from_view(cls, view: Mapping[str, Any]) -> TallyRule:
        """One route of the control plane's answer; ValueError if it is not one."""
        fail_on = [str(item) for item in view["failOn"]]
        slow_ms = view.get("slowCallMs")
        statuses = frozenset(int(item) for item in fail_on if item.isdigit())
        if "timeout" in fail_on:
            statuses |= {504}
        return cls(
            clusters=frozenset(str(c) for c in view["clusters"]),
            any_5xx="5xx" in fail_on,
            statuses=statuses,
            flags=tuple(flag for kind in fail_on for flag in _FAILURE_FLAGS.get(kind, ())),
            slow_ns=int(slow_ms) * 1_000_000 if slow_ms is not None else None,
        )


def _nanos(duration: Any) -> int:
    return int(duration.seconds) * 1_000_000_000 + int(duration.nanos)


class BreakerTallies:
    """Counts by (route, bucket start ms) → [calls, failures, slow]."""

    def __init__(self) -> None:
        self.rules: dict[str, TallyRule] = {}
        self.version = ""
        self._counts: dict[tuple[str, int], list[int]] = {}

    def set_rules(self, version: str, view: Mapping[str, Mapping[str, Any]]) -> None:
        rules = {str(route): TallyRule.from_view(rule) for route, rule in view.items()}
        self.rules, self.version = rules, version
        for key in [k for k in self._counts if k[0] not in rules]:
            del self._counts[key]

    def observe(self, entry: accesslog_pb2.HTTPAccessLogEntry) -> None:
        """Count one entry if it is evidence for a breaker; costs a dict lookup otherwise."""
        common = entry.common_properties
        rule = self.rules.get(common.route_name)
        if rule is None:
            return
        if common.upstream_cluster not in rule.clusters or common.intermediate_log_entry:
            return
        if common.access_log_type not in _FINAL_TYPES:
            return
        flags = common.response_flags
        has_flags = flags.ByteSize() > 0
        if common.upstream_request_attempt_count < 1 and not (
            has_flags and any(getattr(flags, name) for name in _NO_ATTEMPT_FLAGS)
        ):
            return
        response = entry.response
        if response.response_headers.get(FALLBACK_HEADER):
            return  # a fallback's answer, whatever cluster served it
        status = response.response_code.value if response.HasField("response_code") else 0
        failed = (rule.any_5xx and status >= 500) or status in rule.statuses
        if not failed and has_flags:
            failed = any(getattr(flags, name) for name in rule.flags)
        slow = False
        if rule.slow_ns is not None:
            if common.HasField("time_to_last_downstream_tx_byte"):
                slow = _nanos(common.time_to_last_downstream_tx_byte) > rule.slow_ns
            elif common.HasField("duration"):
                slow = _nanos(common.duration) > rule.slow_ns
        start = common.start_time
        bucket = (start.seconds * 1000 + start.nanos // 1_000_000) // BUCKET_MS * BUCKET_MS
        key = (common.route_name, bucket)
        counts = self._counts.get(key)
        if counts is None:
            counts = self._counts[key] = [0, 0, 0]
        counts[0] += 1
        counts[1] += failed
        counts[2] += slow
        metrics.BREAKER_CALLS.inc()

    def take(self) -> list[dict[str, Any]]:
        """Everything counted since the last take, as the tally POST's ``tallies``."""
        counts, self._counts = self._counts, {}
        return [
            {"route": route, "bucket": bucket, "calls": c[0], "failures": c[1], "slow": c[2]}
            for (route, bucket), c in counts.items()
        ]
