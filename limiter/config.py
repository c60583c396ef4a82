"""The config blocks of a process that runs the rate-limit engine (ratelimit_svc, and the
HTTP authorization check when it decides limits): Redis, hybrid mode, where policies
come from."""

from __future__ import annotations

import os
import socket
from typing import Annotated

from pydantic import Field

from limiter.engine import Limiter
from limiter.hybrid import HybridSettings
from servicekit.config_file import HostPort
from servicekit.durations import Duration, Millis
from servicekit.model import Model


class Redis(Model):
    url: str
    timeout: Duration = Millis(50)


class Hybrid(Model):
    max_batch: Annotated[int, Field(ge=1, le=100_000)] = 100


class Xds(Model):
    address: HostPort
    node_id: str = Field(default_factory=lambda: os.environ.get("POD_NAME") or socket.gethostname())
    cluster: str = "ratelimit"


class Policies(Model):
    xds: Xds


def build_limiter(redis: Redis, hybrid: Hybrid, *, expected_instances: int) -> Limiter:
    return Limiter(
        url=redis.url,
        expected_instances=expected_instances,
        timeout=redis.timeout.seconds,
        hybrid=HybridSettings(max_batch=hybrid.max_batch),
    )
