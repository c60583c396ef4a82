"""A translation as one static Envoy bootstrap, for Envoys that run without a control plane
(``envoy --mode validate`` on the golden cases, benchmarks of the translator's listener).

The listener's HCM gets its RouteConfiguration inline instead of ``rds`` (with
``validate_clusters: true``, so Envoy checks that every cluster a route names exists),
each EDS cluster becomes ``type: STATIC`` with its ClusterLoadAssignment (or one
127.0.0.1:1 endpoint when it has none), and the clusters of Gatehouse's own services
(ext_authz, ratelimit, access log) keep the static addresses they already have.
"""

from __future__ import annotations

import copy
from typing import Any

PLACEHOLDER_ENDPOINT = {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 1}}}}


def static_bootstrap(
    listeners: list[dict[str, Any]],
    route_configs: list[dict[str, Any]],
    clusters: list[dict[str, Any]],
    assignments: list[dict[str, Any]],
) -> dict[str, Any]:
    [listener] = copy.deepcopy(listeners)
    [route_config] = copy.deepcopy(route_configs)
    route_config["validate_clusters"] = True
    hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
    assert hcm["rds"]["route_config_name"] == route_config["name"], "the listener asks for this RouteConfiguration"
    del hcm["rds"]
    hcm["route_config"] = route_config
    by_cluster = {a["cluster_name"]: a for a in assignments}
    static_clusters = []
    for data in copy.deepcopy(clusters):
        if "eds_cluster_config" not in data:
            # A service of Gatehouse's own: its addresses are in the cluster already.
            assert data["type"] == "STRICT_DNS" and data["load_assignment"]["endpoints"], data["name"]
            static_clusters.append(data)
            continue
        assert data.pop("type") == "EDS" and "ads" in data.pop("eds_cluster_config")["eds_config"]
        assignment = by_cluster.pop(data["name"])
        if not assignment.get("endpoints"):
            assignment["endpoints"] = [{"lb_endpoints": [PLACEHOLDER_ENDPOINT]}]
        static_clusters.append({**data, "type": "STATIC", "load_assignment": assignment})
    assert by_cluster == {}, f"EDS resources without a cluster: {sorted(by_cluster)}"
    return {"static_resources": {"listeners": [listener], "clusters": static_clusters}}
