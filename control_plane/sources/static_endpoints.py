"""Endpoints from a YAML file: service → addresses. For local runs and tests.

    services:
      order-service:            # this service in any namespace
        - 127.0.0.1:18081
      shop/order-service-v3:    # only in namespace "shop"
        - {address: 127.0.0.1:18082, zone: zone-a, weight: 2}
      payments:9090:            # only for backends on port 9090
        - 127.0.0.1:18090

Each endpoint carries its own port; a backend's ``port`` only picks between keys.
The file is polled; an invalid edit is reported and the last good table stays live.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
import yaml

from control_plane.errors import InvalidEndpointsError, Problem
from servicekit.yaml_documents import load_plain
from control_plane.sources.base import PublishEndpoints
from control_plane.translator.endpoints import Endpoint
from control_plane.translator.names import ClusterRef

log = structlog.get_logger(component="source.endpoints")

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_KEY = re.compile(rf"^({_LABEL}/)?{_LABEL}(:[0-9]{{1,5}})?$")


@dataclass(frozen=True)
class StaticEndpointTable:
    entries: Mapping[str, tuple[Endpoint, ...]]

    def endpoints_for(self, ref: ClusterRef) -> tuple[Endpoint, ...]:
        for key in _keys(ref):
            found = self.entries.get(key)
            if found is not None:
                return found
        return ()

    def knows(self, ref: ClusterRef) -> bool:
        return any(key in self.entries for key in _keys(ref))


def _keys(ref: ClusterRef) -> tuple[str, str, str, str]:
    """The keys that name a backend, most specific first."""
    return (f"{ref.namespace}/{ref.service}:{ref.port}", f"{ref.namespace}/{ref.service}", f"{ref.service}:{ref.port}", ref.service)


def _port_ok(key: str) -> bool:
    """A key's port must be what a backend can name: 1–65535, written without leading zeros."""
    _, colon, port = key.partition(":")
    return not colon or (str(int(port)) == port and 1 <= int(port) <= 65535)


def _endpoint(value: object, where: str) -> Endpoint:
    zone, weight = "", 1
    if isinstance(value, dict):
        unknown = set(value) - {"address", "zone", "weight"}
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        zone = value.get("zone", "")
        weight = value.get("weight", 1)
        if not isinstance(zone, str):
            raise ValueError(f"{where}.zone: must be a string")
        if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 128:
            raise ValueError(f"{where}.weight: must be an integer from 1 to 128")
        value = value.get("address")
        where += ".address"
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected \"ip:port\"")
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"{where}: {value!r} must be an IP address and port (EDS takes no host names)") from None
    if not sep or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{where}: {value!r} needs a port from 1 to 65535")
    return Endpoint(host, int(port), zone, weight)


def parse_endpoints(text: str | bytes, location: str) -> StaticEndpointTable:
    try:
        data = load_plain(text)
    except yaml.YAMLError as exc:
        raise InvalidEndpointsError([Problem(location, "", f"invalid YAML: {exc}")]) from None
    data = {} if data is None else data
    if not isinstance(data, dict) or set(data) - {"services"}:
        raise InvalidEndpointsError([Problem(location, "", "expected a mapping with one key, services")])
    services = data.get("services") or {}
    if not isinstance(services, dict):
        raise InvalidEndpointsError([Problem(location, "services", "expected a mapping of service to addresses")])
    problems: list[Problem] = []
    entries: dict[str, tuple[Endpoint, ...]] = {}
    for key, values in services.items():
        if not isinstance(key, str) or not _KEY.match(key) or not _port_ok(key):
            problems.append(
                Problem(location, f"services.{key}", "keys are service, namespace/service, or either with :port")
            )
            continue
        if not isinstance(values, list):
            problems.append(Problem(location, f"services.{key}", "expected a list of addresses"))
            continue
        found: list[Endpoint] = []
        for index, value in enumerate(values):
            try:
                found.append(_endpoint(value, f"services.{key}[{index}]"))
            except ValueError as exc:
                field, _, reason = str(exc).partition(": ")
                problems.append(Problem(location, field, reason))
        entries[str(key)] = tuple(sorted(set(found)))
    if problems:
        raise InvalidEndpointsError(problems)
    return StaticEndpointTable(entries)


class StaticEndpointsSource:
    """An endpoint source: the file is polled; its first poll completes the first sync."""

    def __init__(self, path: Path, *, poll_interval: float = 0.1, name: str = "static-endpoints") -> None:
        self.name = name
        self._path = path
        self._poll_interval = poll_interval
        self._stamp: tuple[int, int, int] | None = None
        self._table: StaticEndpointTable | None = None
        self._error: InvalidEndpointsError | None = None
        self.synced = asyncio.Event()

    async def run_endpoints(self, publish: PublishEndpoints) -> None:
        while True:
            self.poll(publish)
            self.synced.set()  # a missing or invalid file counts too: it is reported, not waited for
            await asyncio.sleep(self._poll_interval)

    def poll(self, publish: PublishEndpoints) -> None:
        """One cheap stat(); the file is read only when it changed."""
        seen_at = time.monotonic()
        try:
            info = os.stat(self._path)
        except FileNotFoundError:
            self._report(InvalidEndpointsError([Problem(str(self._path), "", "file not found")]))
            return
        stamp = (info.st_mtime_ns, info.st_size, info.st_ino)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            table = parse_endpoints(self._path.read_bytes(), str(self._path))
        except InvalidEndpointsError as exc:
            self._report(exc)
            return
        self._error = None
        if table != self._table:
            self._table = table
            log.info("endpoints_loaded", file=str(self._path), services=len(table.entries))
            publish(table, seen_at)

    def _report(self, error: InvalidEndpointsError) -> None:
        if self._error is None or self._error.problems != error.problems:
            log.error("endpoints_rejected", problems=[str(p) for p in error.problems], serving_last_good=self._table is not None)
        self._error = error

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": "static-endpoints",
            "file": str(self._path),
            "services": len(self._table.entries) if self._table else 0,
            "error": [str(p) for p in self._error.problems] if self._error else None,
        }
