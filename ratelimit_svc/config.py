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

from pathlib import Path
from typing import Annotated

from pydantic import Field

from limiter.config import Hybrid, Policies, Redis
from servicekit.config_file import HostPort, Listen, load_config_file
from servicekit.model import Model
from servicekit.span_export import SpanExport


class RateLimitConfig(Model):
    listen: HostPort = "127.0.0.1:8081"
    metrics: Listen = Listen(listen="127.0.0.1:9194")
    redis: Redis
    expected_instances: Annotated[int, Field(ge=1)] = 1
    hybrid: Hybrid = Hybrid()
    policies: Policies
    tracing: SpanExport | None = None
    """Report a span per decision to an OTLP collector when Envoy traces the call (docs/tracing.md)."""
    base_dir: Annotated[str, Field(exclude=True)] = "."


def load_ratelimit_config(path: Path) -> RateLimitConfig:
    return load_config_file(path, RateLimitConfig)
