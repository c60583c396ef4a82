"""Route policies from the control plane, over its ADS server (state of the world).

The control plane serves one ``gatehouse.policy.v1.RoutePolicy`` per route with
limits (and, for the HTTP authorization transport, per route that needs a token). This
client subscribes to that type and hands every response's policies to ``on_update``,
which builds its table and raises ValueError if it cannot use them; the response is then
NACKed with the reason and the table it had keeps serving. An update that could use all
but some routes applies the rest and raises ``PartlyApplied`` naming those routes: the
response is NACKed with their reasons (so the control plane puts them on each route's
status), while every other route's new rules serve, as Envoy applies the good listeners
of an LDS update it NACKs. A lost control plane keeps the last table; the stream
reconnects with back-off.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable, Mapping

import grpc
import structlog
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.protobuf.message import DecodeError
from google.rpc import status_pb2

from limiter.model import LimitSpec
from servicekit.protos.gatehouse.policy.v1 import policy_pb2

log = structlog.get_logger(component="ratelimit.policies")

POLICY_URL = f"type.googleapis.com/{policy_pb2.RoutePolicy.DESCRIPTOR.full_name}"
"""The type URL the control plane serves policies under (both sides derive it from the proto)."""

Policies = Mapping[str, LimitSpec]
"""Limit id ("<route>#<index>") → its spec."""


class PartlyApplied(ValueError):
    """The update is live but for these routes (route id → why each was refused)."""

    def __init__(self, refused: Mapping[str, str]) -> None:
        self.refused = dict(refused)
        shown = sorted(self.refused.items())
        more = f" (and {len(shown) - 20} more)" if len(shown) > 20 else ""
        super().__init__("; ".join(f"route {route}: {why}" for route, why in shown[:20]) + more)


def limit_spec(limit: policy_pb2.Limit) -> LimitSpec:
    """A delivered limit as the engine's spec; ValueError (LimitSpecError) if unusable."""
    if limit.algorithm not in ("slidingWindow", "tokenBucket", "fixedWindow"):
        raise ValueError(f"limit {limit.id}: unknown algorithm {limit.algorithm!r}")
    if limit.limit < 1 or limit.window_ms < 1:
        raise ValueError(f"limit {limit.id}: limit and window must be positive")
    return LimitSpec(
        id=limit.id,
        algorithm=limit.algorithm,  # type: ignore[arg-type]
        limit=int(limit.limit),
        window_ms=int(limit.window_ms),
        refill_tokens=int(limit.refill_tokens),
        shadow=limit.shadow,
        mode="hybrid" if limit.mode == "hybrid" else "exact",
        on_store_failure=limit.on_store_failure if limit.on_store_failure in ("open", "closed") else "local",  # type: ignore[arg-type]
    )


def descriptor_key(policy_key: str) -> str:
    """The descriptor key Envoy uses for a policy key (control_plane/translator/ratelimit.py);
    counter keys are ``<descriptor key>=<value>`` on both transports."""
    return "remote_address" if policy_key == "ip" else policy_key


def parse_policies(policies: list[policy_pb2.RoutePolicy]) -> tuple[dict[str, LimitSpec], dict[str, str]]:
    """(limit id → spec, limit id → key kind) from RoutePolicy resources."""
    specs: dict[str, LimitSpec] = {}
    keys: dict[str, str] = {}
    for policy in policies:
        for limit in policy.limits:
            specs[limit.id] = limit_spec(limit)
            keys[limit.id] = limit.key
    return specs, keys


class PolicySource:
    def __init__(
        self,
        address: str,
        *,
        node_id: str,
        cluster: str,
        on_update: Callable[[list[policy_pb2.RoutePolicy]], None],
    ) -> None:
        self._address = address
        self._node = base_pb2.Node(id=node_id, cluster=cluster)
        self._on_update = on_update
        self.synced = asyncio.Event()
        self.version = ""
        self.errors = 0

    async def run(self) -> None:
        backoff = 0.2
        while True:
            try:
                await self._stream()
                backoff = 0.2
            except (grpc.aio.AioRpcError, OSError) as exc:
                self.errors += 1
                log.warning("policy_stream_lost", address=self._address, error=str(exc)[:300], retry_in=round(backoff, 2))
            await asyncio.sleep(backoff * (0.5 + random.random()))
            backoff = min(backoff * 2, 5.0)

    async def _stream(self) -> None:
        requests: asyncio.Queue[discovery_pb2.DiscoveryRequest] = asyncio.Queue()
        await requests.put(discovery_pb2.DiscoveryRequest(node=self._node, type_url=POLICY_URL, version_info=self.version))

        async def outgoing() -> AsyncIterator[discovery_pb2.DiscoveryRequest]:
            while True:
                yield await requests.get()

        async with grpc.aio.insecure_channel(self._address) as channel:
            stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel)
            async for response in stub.StreamAggregatedResources(outgoing()):
                ack = discovery_pb2.DiscoveryRequest(type_url=POLICY_URL, response_nonce=response.nonce)
                try:
                    policies = [policy_pb2.RoutePolicy.FromString(r.value) for r in response.resources if r.type_url == POLICY_URL]
                    self._on_update(policies)
                except PartlyApplied as exc:
                    # Live but for the named routes: NACKed for them, served for the rest.
                    log.error("policies_partly_applied", version=response.version_info, refused=len(exc.refused), error=str(exc)[:2000])
                    ack.version_info = self.version
                    ack.error_detail.CopyFrom(status_pb2.Status(code=3, message=str(exc)))
                    self.synced.set()
                except (ValueError, TypeError, DecodeError) as exc:
                    log.error("policies_rejected", version=response.version_info, error=str(exc))
                    ack.version_info = self.version
                    ack.error_detail.CopyFrom(status_pb2.Status(code=3, message=str(exc)))
                else:
                    self.version = ack.version_info = response.version_info
                    self.synced.set()
                    log.info("policies_applied", version=response.version_info, routes=len(policies))
                await requests.put(ack)
