"""Route status, as the leader writes it: Accepted, Programmed, ResolvedRefs and Enforced conditions.

- ``Accepted``: the object is valid, won any conflict, and asks for nothing this gateway
  cannot enforce (reasons ``Accepted``, ``Invalid``, ``Conflict``, ``Unenforceable``: the
  message names the missing setting and the Helm value that provides it).
- ``Programmed``: Envoy has ACKed a route configuration holding this generation
  (``Programmed``), has not yet (``Pending``), or NACKed it (``Rejected``, with Envoy's
  message). No peer puts NACKs on the object; this is where an operator looks first.
- ``Enforced``: on an accepted route, ``False`` (reason ``NotEnforced``) when it is served
  without something it asks for (``rateLimits`` under ``rateLimitsWithoutLimiter:
  serveUnlimited``; an ``errorRate`` breaker no tally reaches), loudly, with what and why.
- ``ResolvedRefs``: every Service in another namespace the route names is permitted by a
  ReferenceGrant (``ResolvedRefs``), or not (``RefNotPermitted``, naming the reference and
  the grant it needs; the route is then not served: ``Programmed=False``/``NotServing``).

Writes are idempotent merge patches of the status subresource, made only when the
conditions differ from what this replica last wrote, in a worker thread with a timeout.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import dataclass
from typing import Any

import structlog
# Imported here, not through ``client.<Name>``: the lazy import on first use held the
# event loop for 120-190 ms.
from kubernetes.client import ApiClient, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from control_plane.model.crd import GROUP, PLURAL, VERSION

log = structlog.get_logger(component="route_status")

REQUEST_TIMEOUT = 5.0


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class DesiredStatus:
    generation: int
    conditions: tuple[Condition, ...]


class StatusWriter:
    def __init__(self, api: ApiClient) -> None:
        self._objects = CustomObjectsApi(api)
        self._desired: dict[str, DesiredStatus] = {}
        self._written: dict[str, DesiredStatus] = {}
        self._since: dict[tuple[str, str], tuple[str, str]] = {}
        self._wake = asyncio.Event()
        self.writes = 0

    def set(self, key: str, desired: DesiredStatus) -> None:
        if self._desired.get(key) != desired:
            self._desired[key] = desired
            self._wake.set()

    def set_condition(self, key: str, condition: Condition) -> None:
        current = self._desired.get(key)
        if current is None:
            return
        others = tuple(c for c in current.conditions if c.type != condition.type)
        self.set(key, DesiredStatus(current.generation, (*others, condition)))

    def get(self, key: str) -> DesiredStatus | None:
        return self._desired.get(key)

    def forget(self, key: str) -> None:
        self._desired.pop(key, None)
        self._written.pop(key, None)

    def rewrite_all(self) -> None:
        """After gaining leadership: what others wrote may differ from what we want."""
        self._written.clear()
        self._wake.set()

    async def run(self, leading: Any) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not leading():
                continue
            for key, desired in list(self._desired.items()):
                if self._written.get(key) == desired:
                    continue
                try:
                    await asyncio.to_thread(self._write, key, desired)
                    self._written[key] = desired
                    self.writes += 1
                except ApiException as exc:
                    if exc.status == 404:
                        self.forget(key)
                        continue
                    log.warning("status_write_failed", route=key, status=exc.status, reason=exc.reason)
                    self._retry_later()
                except Exception as exc:  # noqa: BLE001 - API server away: retry later
                    log.warning("status_write_failed", route=key, error=str(exc)[:300])
                    self._retry_later()

    def _retry_later(self) -> None:
        asyncio.get_running_loop().call_later(2.0, self._wake.set)

    def _write(self, key: str, desired: DesiredStatus) -> None:
        namespace, name = key.split("/", 1)
        now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        conditions = []
        for condition in desired.conditions:
            since_key = (key, condition.type)
            status, since = self._since.get(since_key, ("", now))
            if status != condition.status:
                since = now
            self._since[since_key] = (condition.status, since)
            conditions.append(
                {
                    "type": condition.type,
                    "status": condition.status,
                    "reason": condition.reason,
                    "message": condition.message[:32000],
                    "observedGeneration": desired.generation,
                    "lastTransitionTime": since,
                }
            )
        body = {"status": {"observedGeneration": desired.generation, "conditions": conditions}}
        self._objects.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, name, body, _request_timeout=REQUEST_TIMEOUT
        )
