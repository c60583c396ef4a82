"""One control-plane replica writes Route status: the holder of a coordination.k8s.io Lease.

Every replica serves xDS; only status writes are single-writer, so replicas never fight
over a Route's conditions. The holder renews every ``retry`` seconds; a replica takes
the lease over once it has gone ``duration`` seconds without renewal. A holder that
cannot renew for ``duration`` seconds stops considering itself leader before anyone
else may take over, so two writers never overlap for long.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time

import structlog
# Imported here, not through ``client.<Name>``: the client loads its API and model
# modules lazily, and building their pydantic models on first use held the event loop
# for 120-230 ms (the loop watchdog caught it).
from kubernetes.client import ApiClient, CoordinationV1Api, V1Lease, V1LeaseSpec, V1ObjectMeta
from kubernetes.client.exceptions import ApiException

log = structlog.get_logger(component="leader")

REQUEST_TIMEOUT = 5.0


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class LeaderElector:
    def __init__(
        self,
        api: ApiClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        duration: int = 15,
        retry: float = 2.0,
    ) -> None:
        self._leases = CoordinationV1Api(api)
        self._namespace = namespace
        self._name = name
        self.identity = identity
        self._duration = duration
        self._retry = retry
        self._renewed = 0.0
        self._answered = time.monotonic()  # not isolated before a first try has failed for long
        self._holding = False
        self._leading = False
        self.changed = asyncio.Event()
        """Set whenever leadership is gained or lost."""

    @property
    def leading(self) -> bool:
        """We hold the lease and renewed it recently enough that nobody else may take it."""
        return self._holding and time.monotonic() - self._renewed < self._duration

    @property
    def isolated(self) -> bool:
        """The API server has not answered us for a lease duration: nobody can count on
        us holding the lease, and we cannot see who does."""
        return time.monotonic() - self._answered >= self._duration

    async def run(self) -> None:
        while True:
            started = time.monotonic()
            try:
                held = await asyncio.to_thread(self._try_acquire_or_renew)
                self._answered = started
                if held:
                    self._renewed = started
                self._holding = held
            except Exception as exc:  # noqa: BLE001 - the API server may be away; keep what we had until it expires
                log.warning("lease_error", lease=self._name, error=str(exc)[:300])
            self._set(self.leading)
            await asyncio.sleep(self._retry)

    def _set(self, leading: bool) -> None:
        if leading != self._leading:
            self._leading = leading
            log.info("leadership", leading=leading, identity=self.identity, lease=self._name)
            self.changed.set()

    def _try_acquire_or_renew(self) -> bool:
        now = _now()
        try:
            lease = self._leases.read_namespaced_lease(self._name, self._namespace, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = V1Lease(
                metadata=V1ObjectMeta(name=self._name, namespace=self._namespace),
                spec=V1LeaseSpec(
                    holder_identity=self.identity,
                    lease_duration_seconds=self._duration,
                    acquire_time=now,
                    renew_time=now,
                    lease_transitions=0,
                ),
            )
            try:
                self._leases.create_namespaced_lease(self._namespace, body, _request_timeout=REQUEST_TIMEOUT)
            except ApiException as conflict:
                if conflict.status == 409:
                    return False
                raise
            return True
        spec = lease.spec
        if spec is None:
            spec = lease.spec = V1LeaseSpec()
        holder = spec.holder_identity
        renewed = spec.renew_time or spec.acquire_time
        expired = renewed is None or (now - renewed).total_seconds() > (spec.lease_duration_seconds or self._duration)
        if holder != self.identity and not expired:
            return False
        if holder != self.identity:
            spec.holder_identity = self.identity
            spec.acquire_time = now
            spec.lease_transitions = (spec.lease_transitions or 0) + 1
        spec.renew_time = now
        spec.lease_duration_seconds = self._duration
        try:
            # replace carries the resourceVersion we read: a concurrent taker makes this 409.
            self._leases.replace_namespaced_lease(self._name, self._namespace, lease, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True
