"""A route's ``outlierDetection``: passive health checking of the backend cluster's hosts
(Envoy's outlier detection): consecutive 5xx, a failure percentage, or a success rate
far below the others'."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from servicekit.durations import Duration
from servicekit.model import Model


class FailurePercentage(Model):
    """Eject a host whose share of 5xx/failed requests over one ``interval`` reaches
    ``threshold`` percent; only counted for hosts with ``requestVolume`` requests in it, and
    only while the cluster has ``minimumHosts`` hosts."""

    threshold: Annotated[int, Field(ge=1, le=100)]
    minimum_hosts: Annotated[int, Field(ge=1, le=10_000)] = 5
    request_volume: Annotated[int, Field(ge=1, le=1_000_000)] = 50


class SuccessRate(Model):
    """Eject a host whose success rate is ``stdevFactor`` standard deviations below the mean
    of the cluster's hosts; needs ``minimumHosts`` hosts with ``requestVolume`` requests
    each in the ``interval``."""

    stdev_factor: Annotated[float, Field(ge=0.1, le=100)] = 1.9
    minimum_hosts: Annotated[int, Field(ge=1, le=10_000)] = 5
    request_volume: Annotated[int, Field(ge=1, le=1_000_000)] = 100


class OutlierDetection(Model):
    """Passive health checking: a host answering ``consecutive5xx`` 5xx in a row is ejected
    for ``baseEjection`` times the number of its ejections; unset fields keep Envoy's defaults."""

    consecutive5xx: Annotated[int, Field(ge=1, le=1_000_000)] | None = Field(default=None, alias="consecutive5xx")
    interval: Duration | None = None
    base_ejection: Duration | None = None
    max_ejection_percent: Annotated[int, Field(ge=0, le=100)] | None = None
    failure_percentage: FailurePercentage | None = None
    success_rate: SuccessRate | None = None
