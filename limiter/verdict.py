"""All of a request's limits at once: every one must pass; the binding one speaks.

Shared by the RateLimitService (one gRPC call, every descriptor of the route) and the
HTTP authorization check (limits before and after the token). Shadow limits are counted,
never enforced. The binding limit is the one that denied (the longest wait), else the one
with the least left; its numbers become ``X-RateLimit-Limit/Remaining/Reset`` and, on a
denial, ``Retry-After``. A denied request is not counted against the limits that passed
it (``refund``): a user over their own limit must not drain everyone behind their IP.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass

from limiter.engine import Limiter
from limiter.model import Decision, LimitSpec


@dataclass(frozen=True, slots=True)
class Verdict:
    checks: tuple[tuple[LimitSpec, str], ...]
    decisions: tuple[Decision, ...]
    denied: bool
    binding: Decision | None
    cost: int = 1


def _binding(checks: Sequence[tuple[LimitSpec, str]], decisions: Sequence[Decision]) -> tuple[bool, Decision | None]:
    binding: Decision | None = None
    denied_any = False
    for (spec, _), decision in zip(checks, decisions):
        if spec.shadow:
            continue
        if not decision.allowed:
            if not denied_any or binding is None or decision.reset_after > binding.reset_after:
                binding = decision
            denied_any = True
        elif not denied_any and (binding is None or decision.remaining < binding.remaining):
            binding = decision
    return denied_any, binding


async def decide(limiter: Limiter, checks: Sequence[tuple[LimitSpec, str]], cost: int = 1) -> Verdict:
    """Hit every (spec, key) once; on a denial, give the others' hits back."""
    if len(checks) == 1:
        spec, key = checks[0]
        decisions: Sequence[Decision] = [await limiter.hit(spec, key, cost)]
    else:
        decisions = await asyncio.gather(*(limiter.hit(spec, key, cost) for spec, key in checks))
    denied, binding = _binding(checks, decisions)
    verdict = Verdict(tuple(checks), tuple(decisions), denied, binding, cost)
    if denied and len(checks) > 1:
        await refund(limiter, verdict)
    return verdict


async def refund(limiter: Limiter, verdict: Verdict) -> None:
    """Un-count every hit of ``verdict`` (the request was denied, here or later)."""
    await asyncio.gather(*(
        limiter.refund(spec, key, decision, verdict.cost) for (spec, key), decision in zip(verdict.checks, verdict.decisions)
    ))


def merge(*verdicts: Verdict | None) -> Verdict | None:
    """One verdict over several allowed ones (the binding: the least left)."""
    present = [v for v in verdicts if v is not None]
    if not present:
        return None
    if len(present) == 1:
        return present[0]
    checks = tuple(c for v in present for c in v.checks)
    decisions = tuple(d for v in present for d in v.decisions)
    denied, binding = _binding(checks, decisions)
    return Verdict(checks, decisions, denied, binding, present[0].cost)


def rate_limit_headers(binding: Decision, denied: bool) -> list[tuple[str, str]]:
    """``X-RateLimit-*`` of the binding decision, and ``Retry-After`` on a denial."""
    reset = max(1, math.ceil(binding.reset_after)) if denied else max(0, math.ceil(binding.reset_after))
    headers = [
        ("x-ratelimit-limit", str(binding.limit)),
        ("x-ratelimit-remaining", str(max(0, binding.remaining))),
        ("x-ratelimit-reset", str(reset)),
    ]
    if denied:
        headers.append(("retry-after", str(reset)))
    return headers
