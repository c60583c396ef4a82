"""ratelimit_svc configuration. Documented in docs/ratelimit.md.

    listen: 127.0.0.1:8081                # the RateLimitService gRPC endpoint Envoy calls
    metrics: {listen: 127.0.0.1:9194}     # /healthz, /readyz, /metrics
    redis: {url: redis://127.0.0.1:6379/0, timeout: 50ms}   # redis+cluster://host:port for a cluster
    expectedInstances: 2                  # onStoreFailure local: each instance allows limit ÷ this
    hybrid: {maxBatch: 100}
    policies:
      xds: {address: 127.0.0.1:18000, nodeId: ratelimit-0}  # the control plane's ADS
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Annotated

from pydantic import Field, ValidationError

from control_plane.errors import ConfigError
from control_plane.model.durations import Duration
from control_plane.model.loading import field_path
from control_plane.model.schema import Model
from control_plane.model.yaml_documents import load_plain

HostPort = Annotated[str, Field(pattern=r"^[^\s:]+:[0-9]{1,5}$|^\[[0-9a-fA-F:]+\]:[0-9]{1,5}$")]


class Listen(Model):
    listen: HostPort


class Redis(Model):
    url: str
    timeout: Duration = 50


class Hybrid(Model):
    max_batch: Annotated[int, Field(ge=1, le=100_000)] = 100


class Xds(Model):
    address: HostPort
    node_id: str = Field(default_factory=lambda: os.environ.get("POD_NAME") or socket.gethostname())
    cluster: str = "ratelimit"


class Policies(Model):
    xds: Xds


class RateLimitConfig(Model):
    listen: HostPort = "127.0.0.1:8081"
    metrics: Listen = Listen(listen="127.0.0.1:9194")
    redis: Redis
    expected_instances: Annotated[int, Field(ge=1)] = 1
    hybrid: Hybrid = Hybrid()
    policies: Policies
    base_dir: Annotated[str, Field(exclude=True)] = "."


def load_ratelimit_config(path: Path) -> RateLimitConfig:
    try:
        data = load_plain(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    data["baseDir"] = str(path.resolve().parent)
    try:
        return RateLimitConfig.model_validate(data)
    except ValidationError as exc:
        lines = [f"{path}: {field_path(e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False)]
        raise ConfigError("\n".join(lines)) from None
