"""``workers: N``: N processes of one service behind one port, and the supervisor over them.

A Python process uses one core. The supervisor starts N copies of the service's own
command (``--worker <i>``); each binds the service port with SO_REUSEPORT, so the kernel
spreads connections across them, and each keeps its own state (revocation mirror, token
cache, hybrid rate-limit buckets). A worker that dies is started again (1 s backoff,
doubling to 30 s while it keeps dying); the others keep serving meanwhile.

The supervisor owns the metrics address: ``/readyz`` is ready when every worker is,
``/metrics`` is every worker's scrape with a ``worker`` label added, so one target
still describes the service. Each worker serves its own admin HTTP on an ephemeral
loopback port it writes to ``<state dir>/worker-<i>.port``.

SIGTERM or SIGINT to the supervisor is passed to every worker, which shut down as a
single process would; the supervisor exits when they have (or kills them after 15 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

log = structlog.get_logger(component="workers")

WORKER_ENV = "GATEHOUSE_WORKER"
STATE_ENV = "GATEHOUSE_WORKER_STATE"
SCRAPE_TIMEOUT = 2.0
STOP_TIMEOUT = 15.0


def available_cpus() -> int:
    """The CPUs this process may use: its affinity, capped by a cgroup v2 CPU quota."""
    count = len(os.sched_getaffinity(0))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            count = min(count, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, count)


def worker_index() -> int | None:
    """This process's worker index, or None when it is not a supervised worker."""
    value = os.environ.get(WORKER_ENV)
    return int(value) if value is not None and value.isdigit() else None


def announce_admin_port(port: int) -> None:
    """A worker tells the supervisor where its /readyz and /metrics are."""
    index, state = worker_index(), os.environ.get(STATE_ENV)
    if index is None or not state:
        return
    path = Path(state) / f"worker-{index}.port"
    temporary = path.with_suffix(".tmp")
    temporary.write_text(str(port))
    temporary.replace(path)


def check_port_free(address: str) -> None:
    """Refuse a port someone already listens on: with SO_REUSEPORT the workers would
    otherwise share it silently with a stale process. SO_REUSEADDR on the probe: the
    connections of an instance that was killed stay in TIME_WAIT on the port for a
    minute, and a restarted instance must not be refused for them (a listener still is)."""
    host, _, port = address.rpartition(":")
    with socket.socket(socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host.strip("[]"), int(port)))
        except OSError as exc:
            raise OSError(f"cannot listen on {address}: {exc.strerror or exc}") from None


@dataclass
class _Worker:
    index: int
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    restarts: int = 0
    backoff: float = 1.0
    admin_port: int | None = None
    waiter: asyncio.Task[int] | None = field(default=None, repr=False)


class Supervisor:
    """Runs ``argv + ["--worker", i]`` for i in 0..N-1; serves the merged /readyz and /metrics."""

    def __init__(self, argv: Sequence[str], *, workers: int, metrics_address: str, service_addresses: Sequence[str]) -> None:
        self._argv = list(argv)
        self._workers = [_Worker(i) for i in range(workers)]
        self._metrics_address = metrics_address
        self._service_addresses = tuple(service_addresses)
        self._state = Path(tempfile.mkdtemp(prefix="gatehouse-workers-"))
        self._stopping = False
        self._session: aiohttp.ClientSession | None = None

    async def run(self) -> None:
        for address in self._service_addresses:
            check_port_free(address)
        host, _, port = self._metrics_address.rpartition(":")
        app = web.Application()
        app.add_routes([web.get("/healthz", self._healthz), web.get("/readyz", self._readyz), web.get("/metrics", self._metrics),
                        web.get("/.well-known/{name}", self._well_known)])
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, host.strip("[]"), int(port), reuse_address=True).start()
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT))
        log.info("workers_starting", workers=len(self._workers), listen=list(self._service_addresses))
        try:
            for worker in self._workers:
                await self._start(worker)
            await asyncio.Event().wait()
        finally:
            self._stopping = True
            await self._stop_all()
            await self._session.close()
            await runner.cleanup()
            for path in self._state.glob("*"):
                path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                self._state.rmdir()

    # -- workers ----------------------------------------------------------------------

    async def _start(self, worker: _Worker) -> None:
        env = {**os.environ, WORKER_ENV: str(worker.index), STATE_ENV: str(self._state)}
        (self._state / f"worker-{worker.index}.port").unlink(missing_ok=True)
        worker.admin_port = None
        argv = [*self._argv, "--worker", str(worker.index)]
        # Spawned from a worker thread: the spawning thread waits for the child's exec.
        worker.process = await asyncio.to_thread(subprocess.Popen, argv, env=env, stdin=subprocess.DEVNULL)
        worker.started = time.monotonic()
        worker.waiter = asyncio.create_task(asyncio.to_thread(worker.process.wait), name=f"worker-{worker.index}")
        worker.waiter.add_done_callback(lambda done: self._exited(worker, done))
        log.info("worker_started", worker=worker.index, pid=worker.process.pid)

    def _exited(self, worker: _Worker, done: asyncio.Task[int]) -> None:
        if self._stopping or done.cancelled():
            return
        code = done.result()
        if time.monotonic() - worker.started > 60:
            worker.backoff = 1.0
        log.error("worker_exited", worker=worker.index, code=code, restart_in=worker.backoff)
        worker.restarts += 1
        delay, worker.backoff = worker.backoff, min(worker.backoff * 2, 30.0)
        asyncio.get_running_loop().call_later(delay, lambda: asyncio.ensure_future(self._restart(worker)))

    async def _restart(self, worker: _Worker) -> None:
        if not self._stopping:
            await self._start(worker)

    async def _stop_all(self) -> None:
        running = [w for w in self._workers if w.process is not None and w.process.poll() is None]
        for worker in running:
            assert worker.process is not None
            worker.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for worker in running:
            assert worker.process is not None
            try:
                await asyncio.to_thread(worker.process.wait, max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("worker_killed", worker=worker.index, reason="no exit after SIGTERM")
                worker.process.kill()
                await asyncio.to_thread(worker.process.wait)

    def _admin_port(self, worker: _Worker) -> int | None:
        if worker.admin_port is None:
            with contextlib.suppress(OSError, ValueError):
                worker.admin_port = int((self._state / f"worker-{worker.index}.port").read_text())
        return worker.admin_port

    async def _get(self, worker: _Worker, path: str) -> tuple[int, str] | None:
        port = self._admin_port(worker)
        if port is None or self._session is None or worker.process is None or worker.process.poll() is not None:
            return None
        try:
            async with self._session.get(f"http://127.0.0.1:{port}{path}") as reply:
                return reply.status, await reply.text()
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return None

    # -- the supervisor's HTTP --------------------------------------------------------

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _: web.Request) -> web.Response:
        answers = await asyncio.gather(*(self._get(w, "/readyz") for w in self._workers))
        lines = []
        for worker, answer in zip(self._workers, answers):
            state = "not running" if answer is None else answer[1].strip()
            lines.append(f"worker {worker.index}: {state}")
        ready = all(a is not None and a[0] == 200 for a in answers)
        return web.Response(status=200 if ready else 503, text="\n".join(lines) + "\n")

    async def _well_known(self, request: web.Request) -> web.Response:
        """A document every worker serves alike (ext_authz's upstream-token JWKS): the
        first worker's answer that is 200; 404 if none has one."""
        for worker in self._workers:
            answer = await self._get(worker, request.path)
            if answer is not None and answer[0] == 200:
                return web.Response(text=answer[1], content_type="application/json", headers={"cache-control": "max-age=300"})
        return web.Response(status=404, text="not found\n")

    async def _metrics(self, _: web.Request) -> web.Response:
        answers = await asyncio.gather(*(self._get(w, "/metrics") for w in self._workers))
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Merged([(w.index, a[1]) for w, a in zip(self._workers, answers) if a is not None and a[0] == 200], self._workers))
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})


class _Merged:
    """Every worker's families, each sample labelled with its worker; plus the supervisor's own."""

    def __init__(self, scrapes: list[tuple[int, str]], workers: list[_Worker]) -> None:
        self._scrapes = scrapes
        self._workers = workers

    def collect(self) -> list[Metric]:
        merged: dict[str, Metric] = {}
        for index, text in self._scrapes:
            for family in text_string_to_metric_families(text):
                target = merged.get(family.name)
                if target is None:
                    target = merged[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                for sample in family.samples:
                    target.add_sample(sample.name, {**sample.labels, "worker": str(index)}, sample.value, sample.timestamp)
        restarts = Metric("gatehouse_worker_restarts", "Times the supervisor started a worker again after it exited", "counter")
        for worker in self._workers:
            restarts.add_sample("gatehouse_worker_restarts_total", {"worker": str(worker.index)}, worker.restarts)
        return [*merged.values(), restarts]
