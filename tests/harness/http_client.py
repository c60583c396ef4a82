"""Plain HTTP/1.1 requests with keep-alive, and a steady background load that records
every status it sees: the ground truth for "zero non-2xx during a change"."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def upstream(self) -> str | None:
        return self.headers.get("x-upstream")

    def json(self) -> Any:
        return json.loads(self.body)


class Client:
    """One keep-alive connection; reconnects after errors."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 5.0) -> None:
        self._host, self._port, self._timeout = host, port, timeout
        self._conn: http.client.HTTPConnection | None = None

    def request(self, path: str, method: str = "GET", headers: dict[str, str] | None = None) -> Reply:
        for attempt in (1, 2):
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
            try:
                self._conn.request(method, path, headers=headers or {})
                response = self._conn.getresponse()
                body = response.read()
                return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, body)
            except (http.client.HTTPException, OSError):
                self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def get(port: int, path: str, **kwargs: Any) -> Reply:
    client = Client(port)
    try:
        return client.request(path, **kwargs)
    finally:
        client.close()


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.02) -> float:
    """Poll until true; returns the seconds it took. AssertionError names `what`."""
    start = time.monotonic()
    while True:
        if predicate():
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


@dataclass
class LoadReport:
    statuses: Counter[int] = field(default_factory=Counter)
    upstreams: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.statuses.values()) + sum(self.errors.values())

    @property
    def non_2xx(self) -> int:
        return sum(n for status, n in self.statuses.items() if not 200 <= status < 300) + sum(self.errors.values())


class Load:
    """`workers` threads, each looping over `paths` on its own keep-alive connection."""

    def __init__(self, port: int, paths: list[str], workers: int = 4) -> None:
        self._port, self._paths, self._workers = port, paths, workers
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.report = LoadReport()

    def __enter__(self) -> Load:
        for index in range(self._workers):
            thread = threading.Thread(target=self._run, args=(index,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)

    def _run(self, index: int) -> None:
        client = Client(self._port)
        position = index
        while not self._stop.is_set():
            path = self._paths[position % len(self._paths)]
            position += 1
            try:
                reply = client.request(path)
            except Exception as exc:  # noqa: BLE001 - every failure is data here
                with self._lock:
                    self.report.errors[type(exc).__name__] += 1
                    self.report.failures.append(f"{path}: {exc!r}")
                continue
            with self._lock:
                self.report.statuses[reply.status] += 1
                if reply.upstream:
                    self.report.upstreams[reply.upstream] += 1
                if not 200 <= reply.status < 300 and len(self.report.failures) < 50:
                    self.report.failures.append(f"{path}: {reply.status} {reply.body[:200]!r}")
        client.close()
