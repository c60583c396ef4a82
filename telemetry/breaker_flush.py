"""Every ``flushInterval`` (~200 ms), POST the breaker tallies to the control plane(s).

One POST per control-plane URL (each replica keeps its own board, so each gets every
tally), ``Authorization: Bearer <credentialFile>``, at most ``timeout`` each. The answer
carries the classification rules whenever they changed: telemetry needs no breaker
config of its own.

Failure policy: the tallies of a failed POST (timeout, connection refused, a non-2xx
answer) are dropped, never retried or kept, and their calls counted in
``gatehouse_breaker_tallies_dropped_total{reason}``; the control plane's breakers keep
their state (a CLOSED breaker sees fewer calls, an OPEN one still moves to HALF_OPEN on
its timer). The last rules received stay in use. Nothing here touches Envoy's requests.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import structlog

from telemetry import metrics
from telemetry.breaker_tallies import BreakerTallies

log = structlog.get_logger(component="telemetry")

PATH = "/breakers/tallies"


class TallyFlusher:
    def __init__(
        self, tallies: BreakerTallies, *, urls: list[str], credential: str, interval: float, timeout: float
    ) -> None:
        self._tallies = tallies
        self._urls = [url.rstrip("/") + PATH for url in urls]
        self._headers = {"Authorization": f"Bearer {credential}", "Content-Type": "application/json"}
        self._interval = interval
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None
        self._failing: set[str] = set()

    async def run(self) -> None:
        self._session = aiohttp.ClientSession(timeout=self._timeout)
        try:
            while True:
                await self.flush()
                await asyncio.sleep(self._interval)
        finally:
            await self._session.close()

    async def flush(self) -> None:
        tallies = self._tallies.take()
        calls = sum(t["calls"] for t in tallies)
        body = json.dumps({"rulesVersion": self._tallies.version, "tallies": tallies}).encode()
        await asyncio.gather(*(self._post(url, body, calls) for url in self._urls))

    async def _post(self, url: str, body: bytes, calls: int) -> None:
        assert self._session is not None
        try:
            async with self._session.post(url, data=body, headers=self._headers) as response:
                answer = await response.read()
                if response.status != 200:
                    self._failed(url, "refused", calls, f"HTTP {response.status}: {answer[:200].decode(errors='replace')}")
                    return
                data: dict[str, Any] = json.loads(answer)
        except asyncio.TimeoutError:
            self._failed(url, "timeout", calls, "no answer in time")
            return
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            self._failed(url, "unreachable", calls, repr(exc))
            return
        metrics.BREAKER_FLUSHES.labels("ok").inc()
        if url in self._failing:
            self._failing.discard(url)
            log.info("breaker_tallies_flowing", url=url)
        rules = data.get("rules")
        if isinstance(rules, dict):
            try:
                self._tallies.set_rules(str(data.get("rulesVersion", "")), rules)
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("breaker_rules_invalid", url=url, error=repr(exc))
            else:
                log.info("breaker_rules", routes=len(rules), version=self._tallies.version)

    def _failed(self, url: str, reason: str, calls: int, detail: str) -> None:
        metrics.BREAKER_FLUSHES.labels(reason).inc()
        metrics.BREAKER_DROPPED.labels(reason).inc(calls)
        if url not in self._failing:  # once per outage, not every 200 ms
            self._failing.add(url)
            log.warning("breaker_tallies_dropped", url=url, reason=reason, calls=calls, detail=detail)
