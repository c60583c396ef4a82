"""ext_authz's Prometheus metrics, declared once (append new ones here)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

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
