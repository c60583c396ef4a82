"""ext_authz's Prometheus metrics, declared once (append new ones here)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

# Revocation mirror (ext_authz/revocation/mirror.py).
REVOCATION_STATE = Gauge(
    "gatehouse_revocation_mirror_state", "1 for the mirror's current state: syncing, in_sync or degraded", ["state"]
)
REVOCATION_ENTRIES = Gauge("gatehouse_revocation_mirror_entries", "Entries in the local mirror", ["kind"])
REVOCATION_LAG = Gauge(
    "gatehouse_revocation_mirror_lag_seconds", "Seconds since the mirror was last known to be in sync with Redis"
)
REVOCATION_MESSAGES = Counter("gatehouse_revocation_messages_total", "Pub/sub changes applied to the mirror", ["op"])
REVOCATION_RESYNCS = Counter("gatehouse_revocation_resyncs_total", "Full resyncs (SCAN) of the mirror", ["result"])
REVOCATION_REPAIRS = Counter(
    "gatehouse_revocation_resync_repairs_total", "Entries a resync had to correct: changes pub/sub did not deliver"
)
REVOCATION_RECONNECTS = Counter("gatehouse_revocation_reconnects_total", "Times the mirror lost Redis and reconnected")

# Decisions (ext_authz/service.py). ``reason`` is one of the service's own codes, never input.
DECISIONS = Counter("gatehouse_authz_decisions_total", "Authorization decisions", ["result", "reason"])

# JWKS fetches (ext_authz/tokens/jwks.py), labelled by the configured ``iss``: bounded by the config.
JWKS_FETCH_SECONDS = Histogram(
    "gatehouse_authz_jwks_fetch_duration_seconds",
    "Time a JWKS fetch took, whatever its result",
    ["issuer"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)

LOOKUP_RESULTS = ("hit", "failure_hit", "miss")
"""``gatehouse_authz_token_cache_lookups_total{result}``: every check that carried a bearer
credential is one lookup. ``hit``: answered from the verified-token cache (no signature
check); ``failure_hit``: a token string already refused for a reason it always meets again
(the failure cache); ``miss``: parsed and checked from scratch."""

FETCH_RESULTS = ("ok", "not_modified", "error")


class VerifierCollector:
    """Token cache and JWKS numbers, read from the objects at scrape time: no cost per check.

    Labels are ``result`` (the fixed sets above) and ``issuer`` (the configured ``iss``
    values); nothing a client sends (kid, token, subject) ever becomes a label.
    """

    def __init__(self, verifier: Any, keys: Sequence[Any]) -> None:
        self._verifier = verifier
        self._keys = keys

    def collect(self) -> Iterator[Metric]:
        verifier = self._verifier
        lookups = CounterMetricFamily(
            "gatehouse_authz_token_cache_lookups",
            "Checks with a bearer token, by how the token caches answered: hit, failure_hit or miss",
            labels=["result"],
        )
        for result, value in zip(LOOKUP_RESULTS, (verifier.cache_hits, verifier.failure_hits, verifier.cache_misses)):
            lookups.add_metric([result], value)
        entries = GaugeMetricFamily("gatehouse_authz_token_cache_entries", "Verified tokens in the cache")
        entries.add_metric([], verifier.cache_entries)
        # The two below predate the lookups counter (docs/ext-authz.md lists them): kept as they were.
        hits = CounterMetricFamily("gatehouse_authz_token_cache_hits", "Checks answered from the verified-token cache")
        hits.add_metric([], verifier.cache_hits)
        verified = CounterMetricFamily("gatehouse_authz_token_verifications", "Signature verifications (cache misses)")
        verified.add_metric([], verifier.verifications)

        results = CounterMetricFamily(
            "gatehouse_authz_jwks_fetches", "JWKS fetches by result: ok, not_modified or error", labels=["issuer", "result"]
        )
        kid_refetches = CounterMetricFamily(
            "gatehouse_authz_jwks_unknown_kid_refetches",
            "Refetches a token with an unknown kid caused (at most one per unknownKidCooldown)",
            labels=["issuer"],
        )
        fetches = CounterMetricFamily("gatehouse_jwks_fetches", "JWKS fetches started", labels=["issuer"])
        errors = CounterMetricFamily("gatehouse_jwks_fetch_errors", "JWKS fetches that failed", labels=["issuer"])
        usable = GaugeMetricFamily("gatehouse_jwks_keys_usable", "1 while the issuer has usable keys", labels=["issuer"])
        for keys in self._keys:
            name = keys.issuer.issuer
            for result, value in zip(FETCH_RESULTS, (keys.fetches_ok, keys.fetches_not_modified, keys.fetch_errors)):
                results.add_metric([name, result], value)
            kid_refetches.add_metric([name], keys.unknown_kid_refetches)
            fetches.add_metric([name], keys.fetches)
            errors.add_metric([name], keys.fetch_errors)
            usable.add_metric([name], 1 if keys.has_keys else 0)
        yield from (lookups, entries, hits, verified, results, kid_refetches, fetches, errors, usable)


def register_verifier(verifier: Any, keys: Sequence[Any]) -> VerifierCollector:
    collector = VerifierCollector(verifier, keys)
    REGISTRY.register(collector)
    return collector
