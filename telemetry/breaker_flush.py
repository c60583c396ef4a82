"""Every ``flushInterval`` (~200 ms), POST the breaker tallies to the control plane(s).

One POST per control-plane URL (each replica counts every tally, so each gets every
one), ``Authorization: Bearer <credentialFile>``, at most ``timeout`` each. With
``everyAddress`` each URL's host is a name for all the replicas (a headless Service): it
is resolved again every ``RESOLVE_EVERY`` seconds, without blocking the loop, and every
address gets the POST. The answer carries the classification rules whenever they
changed: telemetry needs no breaker config of its own.

Failure policy: the tallies of a failed POST (timeout, connection refused, a non-2xx
answer) are dropped, never retried or kept, and their calls counted in
``gatehouse_breaker_tallies_dropped_total{reason}``; the control plane's breakers keep
their state (a CLOSED breaker sees fewer calls, an OPEN one still moves to HALF_OPEN on
its timer). A name that does not resolve keeps the addresses it had; with none known the
flush's calls are dropped as ``unresolved``. The last rules received stay in use.
Nothing here touches Envoy's requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import socket
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import structlog

from telemetry import metrics
from telemetry.breaker_tallies import BreakerTallies

log = structlog.get_logger(component="telemetry")

PATH = "/breakers/tallies"
RESOLVE_EVERY = 5.0
UNRESOLVED_RETRY = 1.0

Resolver = Callable[[str, int], Awaitable[list[str]]]
"""``(host, port) → addresses``: every address the name has now."""

Target = tuple[str, dict[str, str], str | None]
"""Where one POST goes: (URL, headers, the name TLS checks the certificate against when
the URL holds an address in place of it)."""


async def resolve_all(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


def _with_host(url: str, address: str) -> str:
    """``url`` with ``address`` in place of its host (IPv6 bracketed, a zone's % escaped)."""
    parts = urllib.parse.urlsplit(url)
    literal, _, zone = address.partition("%")
    host = f"[{literal}{'%25' + zone if zone else ''}]" if ipaddress.ip_address(literal).version == 6 else address
    return parts._replace(netloc=f"{host}:{parts.port}" if parts.port else host).geturl()


class TallyFlusher:
    def __init__(
        self,
        tallies: BreakerTallies,
        *,
        urls: list[str],
        credential: str,
        interval: float,
        timeout: float,
        every_address: bool = False,
        resolver: Resolver = resolve_all,
    ) -> None:
        self._tallies = tallies
        self._urls = [url.rstrip("/") + PATH for url in urls]
        self._every_address = every_address
        self._resolver = resolver
        self._headers = {"Authorization": f"Bearer {credential}", "Content-Type": "application/json"}
        self._fixed: list[Target] = [(url, self._headers, None) for url in self._urls]
        self._addresses: dict[str, list[Target]] = {}
        """URL → one target per address of its host, as last resolved (``every_address``)."""
        self._next_resolve = float("-inf")
        self._interval = interval
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None
        self._failing: set[str] = set()

    async def run(self) -> None:
        async with self.session():
            while True:
                await self.flush()
                await asyncio.sleep(self._interval)

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[None]:
        """The HTTP client ``flush`` posts with, open for the block."""
        self._session = aiohttp.ClientSession(timeout=self._timeout)
        try:
            yield
        finally:
            await self._session.close()
            self._session = None

    async def flush(self) -> None:
        tallies = self._tallies.take()
        calls = sum(t["calls"] for t in tallies)
        body = json.dumps({"rulesVersion": self._tallies.version, "tallies": tallies}).encode()
        targets = await self._targets(calls)
        await asyncio.gather(*(self._post(target, body, calls) for target in targets))

    async def _targets(self, calls: int) -> list[Target]:
        if not self._every_address:
            return self._fixed
        if time.monotonic() >= self._next_resolve:
            await self._resolve()
        targets: list[Target] = []
        for url in self._urls:
            addresses = self._addresses.get(url)
            if not addresses:
                self._failed(url, "unresolved", calls, "the name has no address")
            targets.extend(addresses or ())
        return targets

    async def _resolve(self) -> None:
        """Every URL's name again; a failure keeps what it had. Again in ``RESOLVE_EVERY``,
        or in a second while some name has no address at all."""
        for url in self._urls:
            parts = urllib.parse.urlsplit(url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
            try:
                found = await asyncio.wait_for(self._resolver(parts.hostname or "", port), self._timeout.total)
            except (OSError, TimeoutError, ValueError) as exc:
                if url not in self._failing:
                    log.warning("breaker_replicas_unresolved", url=url, error=repr(exc), kept=len(self._addresses.get(url, [])))
                found = []
            if found:
                headers = {**self._headers, "Host": parts.netloc}
                # An address in an https URL: the certificate is still checked against the name.
                tls_name = parts.hostname if parts.scheme == "https" else None
                self._addresses[url] = [(_with_host(url, address), headers, tls_name) for address in found]
        unresolved = any(not self._addresses.get(url) for url in self._urls)
        self._next_resolve = time.monotonic() + (UNRESOLVED_RETRY if unresolved else RESOLVE_EVERY)

    async def _post(self, target: Target, body: bytes, calls: int) -> None:
        assert self._session is not None
        url, headers, tls_name = target
        try:
            async with self._session.post(url, data=body, headers=headers, server_hostname=tls_name) as response:
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
