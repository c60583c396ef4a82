"""The routes whose checks come here, from the control plane, and the steps each one takes.

Each route's ``RoutePolicy`` (over the control plane's ADS) compiles into the steps that
apply to it, in ``STEP_ORDER``; the table is replaced whole on each update, but for the
routes this process cannot enforce (a step ``Refused`` them: limits without
``http.rateLimit``, a room without its ticket key, API keys without a key store, token swap
it may not do; or a limit or a rule the engine refuses). Those are refused alone: the check
answers them 503 (fail closed, never served with less than they asked for), every other
route's new rules apply, and the update is NACKed naming them (``PartlyApplied``), so the
control plane puts the reason on each route's status.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ext_authz.check.credential import Credential
from ext_authz.check.steps import CheckParts, LimitsAfterCredential, LimitsBeforeCredential, Refused, Step
from ext_authz.check.token_age import TokenAge
from ext_authz.check.token_swap import TokenSwapStep
from ext_authz.check.validation import ValidationStep
from ext_authz.check.waiting_room import WaitingRoomStep
from limiter.config import Policies
from limiter.engine import Limiter
from limiter.policies import PartlyApplied, PolicySource
from servicekit.protos.gatehouse.policy.v1 import policy_pb2

STEP_ORDER = (LimitsBeforeCredential, Credential, TokenAge, LimitsAfterCredential, ValidationStep, WaitingRoomStep, TokenSwapStep)
"""The order a request meets its route's steps: limits that do not depend on the caller
(so a client guessing tokens is limited too), the credential, the token's age
(``auth.maxTokenAge``), ``user`` limits, validation
(after the caller passed, so a caller denied learns nothing of the rules), the waiting room
(once everything else passed), token swap (last: its token is for a request that will go)."""


@dataclass(frozen=True, slots=True)
class RouteCheck:
    route: str
    steps: tuple[Step, ...]
    public: bool
    """No credential: the call decides the route's limits (and rules, room) only."""


def route_check(policy: policy_pb2.RoutePolicy, parts: CheckParts) -> RouteCheck:
    """One route's check from its policy; Refused, or ValueError (an unusable limit or rule),
    when this process cannot enforce it."""
    steps = tuple(step for kind in STEP_ORDER if (step := kind.for_route(policy, parts)) is not None)
    return RouteCheck(policy.route, steps, policy.auth.public)


class RouteTable:
    """The routes and their steps, bound to this process's ``CheckParts``."""

    def __init__(self, parts: CheckParts) -> None:
        self.parts = parts
        self.routes: Mapping[str, RouteCheck] = {}
        self.refused: Mapping[str, str] = {}

    def replace(self, policies: Iterable[policy_pb2.RoutePolicy]) -> dict[str, str]:
        """Take every policy this process can enforce; refuse the others, each with why
        (returned, and kept in ``refused``): one bad route costs that route only."""
        scoped = self.parts.table_scoped()
        for part in scoped:
            part.begin()
        routes: dict[str, RouteCheck] = {}
        refused: dict[str, str] = {}
        for policy in policies:
            if not policy.HasField("auth"):
                continue  # its limits are ratelimit_svc's, not this check's
            try:
                routes[policy.route] = route_check(policy, self.parts)
            except (Refused, ValueError) as exc:
                refused[policy.route] = str(exc)
        for part in scoped:
            part.done()
        self.routes, self.refused = routes, refused
        return refused


class RouteSubscription:
    """The table's feed: the control plane's ADS, type RoutePolicy (``limiter.policies``)."""

    def __init__(self, table: RouteTable, policies: Policies) -> None:
        self._table = table
        self._source = PolicySource(
            policies.xds.address, node_id=policies.xds.node_id, cluster=policies.xds.cluster, on_update=self._apply
        )
        self._task: asyncio.Task[None] | None = None

    @property
    def synced(self) -> bool:
        return self._source.synced.is_set()

    def _apply(self, policies: list[policy_pb2.RoutePolicy]) -> None:
        refused = self._table.replace(policies)
        if refused:
            raise PartlyApplied(refused)

    def start(self) -> None:
        self._task = asyncio.create_task(self._source.run(), name="route-policies")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        limiter = self._table.parts.get(Limiter)
        if limiter is not None:
            await limiter.close()  # hybrid: unused reserved tokens go back
