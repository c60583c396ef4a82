"""RateLimitService: all limits of a request at once, refunds, headers that agree with the
descriptor statuses. Redis is unreachable (a closed loopback port), so every limit runs on
the Limiter's in-memory `local` fallback: the real code path, no server needed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2
from prometheus_client import REGISTRY

from limiter import BreakerSettings, Limiter
from limiter.local import LocalStore
from limiter.model import LimitSpec
from ratelimit_svc.service import DOMAIN, PolicyTable, RateLimitService

from tests.harness.ports import free_port
from tests.unit.limiter.specs import FakeClock, spec

OK = rls_pb2.RateLimitResponse.OK
OVER = rls_pb2.RateLimitResponse.OVER_LIMIT


@pytest.fixture
async def limiter() -> AsyncIterator[Limiter]:
    limiter = Limiter(url=f"redis://127.0.0.1:{free_port()}/0", breaker=BreakerSettings(consecutive_failures=1, cooldown=60))
    limiter.local = LocalStore(clock_ms=FakeClock().ms)  # exact counts never straddle a wall-clock window's end
    yield limiter
    await limiter.close()


def descriptor(limit: LimitSpec, kind: str, value: str) -> Any:
    entries = [ratelimit_pb2.RateLimitDescriptor.Entry(key="limit", value=limit.id),
               ratelimit_pb2.RateLimitDescriptor.Entry(key=kind, value=value)]
    return ratelimit_pb2.RateLimitDescriptor(entries=entries)


def setup(limiter: Limiter, *limits: tuple[LimitSpec, str]) -> RateLimitService:
    table = PolicyTable()
    table.replace({s.id: s for s, _ in limits}, {s.id: key for s, key in limits})
    return RateLimitService(limiter, table)


async def ask(service: RateLimitService, *descriptors: Any) -> Any:
    request = rls_pb2.RateLimitRequest(domain=DOMAIN, descriptors=descriptors)
    return await service.ShouldRateLimit(request, None)


def headers(response: Any) -> dict[str, str]:
    return {h.key: h.value for h in response.response_headers_to_add}


async def test_every_limit_must_pass_and_a_denied_request_uses_nothing(limiter: Limiter) -> None:
    user, ip = spec("fixedWindow", 3, 60_000), spec("fixedWindow", 5, 60_000)
    service = setup(limiter, (user, "user"), (ip, "ip"))

    async def call(who: str) -> int:
        response = await ask(service, descriptor(user, "user", who), descriptor(ip, "remote_address", "10.0.0.1"))
        return 429 if response.overall_code == OVER else 200

    assert [await call("alice") for _ in range(4)] == [200, 200, 200, 429]
    # alice's denied request was refunded to the ip limit: 5 - 3 = 2 left for bob.
    assert [await call("bob") for _ in range(3)] == [200, 200, 429]
    # bob's denial (by ip) was refunded to his user limit: he has 3 - 2 = 1 left.
    service._table.replace({user.id: user}, {user.id: "user"})
    assert [await call("bob") for _ in range(2)] == [200, 429]


async def test_headers_agree_with_the_binding_descriptor_status(limiter: Limiter) -> None:
    tight, loose = spec("fixedWindow", 2, 60_000), spec("fixedWindow", 10, 60_000)
    service = setup(limiter, (tight, "user"), (loose, "apiKey"))
    ds = (descriptor(tight, "user", "u"), descriptor(loose, "apiKey", "k"))
    first = await ask(service, *ds)
    assert first.overall_code == OK
    h = headers(first)
    assert (h["x-ratelimit-limit"], h["x-ratelimit-remaining"]) == ("2", "1"), "the limit with the least left binds"
    assert "retry-after" not in h
    assert [s.limit_remaining for s in first.statuses] == [1, 9]
    await ask(service, *ds)
    denied = await ask(service, *ds)
    assert denied.overall_code == OVER
    assert [s.code for s in denied.statuses] == [OVER, OK]
    h = headers(denied)
    status = denied.statuses[0]
    assert h["x-ratelimit-limit"] == str(status.current_limit.requests_per_unit) == "2"
    assert h["x-ratelimit-remaining"] == str(status.limit_remaining) == "0"
    assert h["retry-after"] == h["x-ratelimit-reset"]
    assert 1 <= int(h["retry-after"]) <= 60
    assert abs(int(h["retry-after"]) - status.duration_until_reset.seconds) <= 1
    assert status.current_limit.unit == rls_pb2.RateLimitResponse.RateLimit.MINUTE


async def test_shadow_limits_count_but_never_deny(limiter: Limiter) -> None:
    shadow = spec("fixedWindow", 1, 60_000, shadow=True)
    service = setup(limiter, (shadow, "user"))
    codes = [(await ask(service, descriptor(shadow, "user", "u"))).overall_code for _ in range(3)]
    assert codes == [OK, OK, OK]
    assert REGISTRY.get_sample_value("gatehouse_ratelimit_shadow_total", {"limit": shadow.id}) == 2


async def test_unknown_limits_wrong_key_kinds_and_other_domains_pass_uncounted(limiter: Limiter) -> None:
    known = spec("fixedWindow", 1, 60_000)
    service = setup(limiter, (known, "user"))
    stranger = spec("fixedWindow", 1, 60_000)
    for _ in range(3):
        response = await ask(service, descriptor(stranger, "user", "u"), descriptor(known, "apiKey", "u"))
        assert response.overall_code == OK and [s.code for s in response.statuses] == [OK, OK]
    other = await service.ShouldRateLimit(
        rls_pb2.RateLimitRequest(domain="someone-else", descriptors=[descriptor(known, "user", "u")]), None
    )
    assert other.overall_code == OK
    assert (await ask(service, descriptor(known, "user", "u"))).overall_code == OK, "nothing above was counted"


async def test_removed_limits_drop_their_metric_series(limiter: Limiter) -> None:
    gone, kept = spec("fixedWindow", 5, 60_000), spec("fixedWindow", 5, 60_000)
    service = setup(limiter, (gone, "user"), (kept, "user"))
    await ask(service, descriptor(gone, "user", "u"), descriptor(kept, "user", "u"))
    assert REGISTRY.get_sample_value("gatehouse_ratelimit_hits_total", {"limit": gone.id}) == 1
    service._table.replace({kept.id: kept}, {kept.id: "user"})
    assert REGISTRY.get_sample_value("gatehouse_ratelimit_hits_total", {"limit": gone.id}) is None
    assert REGISTRY.get_sample_value("gatehouse_ratelimit_hits_total", {"limit": kept.id}) == 1
