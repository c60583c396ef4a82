"""Backend service ports → EDS clusters fed over ADS."""

from __future__ import annotations

from typing import Any

from control_plane.translator.messages import Cluster, parse
from control_plane.translator.names import ClusterRef

CONNECT_TIMEOUT = "3s"


def cluster(ref: ClusterRef) -> Cluster:
    data: dict[str, Any] = {
        "name": ref.name,
        "type": "EDS",
        "eds_cluster_config": {"eds_config": {"ads": {}, "resource_api_version": "V3"}},
        "connect_timeout": CONNECT_TIMEOUT,
        "lb_policy": "ROUND_ROBIN",
        # Stats names may not carry '/' or ':' cleanly; give them a stable dotted form.
        "alt_stat_name": f"{ref.namespace}.{ref.service}.{ref.port}",
    }
    return parse(Cluster, data)
