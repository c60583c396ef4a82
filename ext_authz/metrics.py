"""ext_authz's Prometheus metrics, declared once (append new ones here)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

# Revocation mirror (ext_authz/revocation.py).
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

# Decisions (ext_authz/service.py).
DECISIONS = Counter("gatehouse_authz_decisions_total", "Authorization decisions", ["result", "reason"])


class VerifierCollector:
    """Token cache and JWKS numbers, read from the objects at scrape time: no cost per check."""

    def __init__(self, verifier: Any, keys: Sequence[Any]) -> None:
        self._verifier = verifier
        self._keys = keys

    def collect(self) -> Iterator[Metric]:
        hits = CounterMetricFamily("gatehouse_authz_token_cache_hits", "Checks answered from the verified-token cache")
        hits.add_metric([], self._verifier.cache_hits)
        verified = CounterMetricFamily("gatehouse_authz_token_verifications", "Signature verifications (cache misses)")
        verified.add_metric([], self._verifier.verifications)
        fetches = CounterMetricFamily("gatehouse_jwks_fetches", "JWKS fetches", labels=["issuer"])
        errors = CounterMetricFamily("gatehouse_jwks_fetch_errors", "JWKS fetches that failed", labels=["issuer"])
        usable = GaugeMetricFamily("gatehouse_jwks_keys_usable", "1 while the issuer has usable keys", labels=["issuer"])
        for keys in self._keys:
            name = keys.issuer.issuer
            fetches.add_metric([name], keys.fetches)
            errors.add_metric([name], keys.fetch_errors)
            usable.add_metric([name], 1 if keys.has_keys else 0)
        yield from (hits, verified, fetches, errors, usable)


def register_verifier(verifier: Any, keys: Sequence[Any]) -> VerifierCollector:
    collector = VerifierCollector(verifier, keys)
    REGISTRY.register(collector)
    return collector
