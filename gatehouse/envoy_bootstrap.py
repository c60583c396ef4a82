"""Render the Envoy bootstrap for one Envoy: which node it is and where ADS lives.

The template ships inside the package (``gatehouse/data/envoy-bootstrap.yaml``, linked
from ``envoy/bootstrap.yaml``), so an installed wheel renders it too.
"""

from __future__ import annotations

import os
import string
from pathlib import Path
from typing import Any

import yaml

TEMPLATE = Path(os.environ.get("GATEHOUSE_ENVOY_BOOTSTRAP", Path(__file__).resolve().parent / "data" / "envoy-bootstrap.yaml"))


def render_bootstrap(
    *,
    xds_host: str,
    xds_port: int,
    admin_port: int,
    node_id: str = "gateway-0",
    node_cluster: str = "gateway",
    admin_address: str = "127.0.0.1",
    delta: bool = False,
) -> dict[str, Any]:
    text = string.Template(TEMPLATE.read_text()).substitute(
        NODE_ID=node_id,
        NODE_CLUSTER=node_cluster,
        ADMIN_ADDRESS=admin_address,
        ADMIN_PORT=admin_port,
        ADS_API_TYPE="DELTA_GRPC" if delta else "GRPC",
        XDS_HOST=xds_host,
        XDS_PORT=xds_port,
    )
    data: dict[str, Any] = yaml.safe_load(text)
    return data
