"""The reference rate limiter, envoyproxy/ratelimit (Go), as a child process for benchmarks.

The benchmark runs it beside ``python -m gatehouse ratelimit``, behind the same Envoy and the
same Redis, on the same descriptor, so both answer the same question: how fast is a global
fixed-window limit through Envoy's ``envoy.filters.http.ratelimit`` filter.

``scripts/build-ratelimit-peer`` builds the binary (a cache outside the checkout, path on its
last stdout line); :func:`peer_binary` runs it. :class:`RatelimitPeer` writes the peer's
descriptor config, starts it with every listener on 127.0.0.1, waits until it serves gRPC
with that config loaded, and stops it by pid (``servicekit.child_process.ManagedProcess``).

How the peer works, as far as a comparison cares (read from its source at the pinned
version): one fixed window per (domain, descriptor entries, unit); each decision is one
pipelined ``INCRBY key hits`` + ``EXPIRE key ttl`` round trip; key
``<CACHE_KEY_PREFIX><domain>_<key>_<value>_<window start, unix s>``; with a local cache it
remembers over-limit keys in process and answers them without Redis until the window ends.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from bench.kit.run import REPO_ROOT
from servicekit.child_process import ManagedProcess, port_open

BUILD_SCRIPT = REPO_ROOT / "scripts" / "build-ratelimit-peer"
HOST = "127.0.0.1"
"""Every listener of the peer (gRPC, HTTP, debug, optional Prometheus) binds here only."""

UNITS = ("second", "minute", "hour", "day")
"""The units the peer's config accepts (its ``rate_limit.unit``)."""

DEFAULT_LOCAL_CACHE_BYTES = 1 << 20
"""freecache of over-limit keys: 1 MiB (freecache's floor is 512 KiB). Over-limit answers
then cost no Redis call until the window ends: the peer's own fast path for denials."""

DEFAULT_PIPELINE_WINDOW = "150us"
"""REDIS_PIPELINE_WINDOW, the peer's README recommendation (150-500 µs, low end): radix v4's
WriteFlushInterval, which would flush concurrent decisions' writes together instead of one
write syscall each. It batches syscalls, not decisions: each decision is still its own
INCRBY+EXPIRE. "0" is the peer's default.

At the pinned version the setting only reaches radix in ``REDIS_TYPE=cluster``
(``src/redis/driver_impl.go``: ``if isCluster && pipelineWindow > 0``): with
``REDIS_TYPE=SINGLE``, as here, it is read and ignored, so 0, 150us and 500us run the same code.
It is still set, so the peer runs as its README tells operators to run it."""


def peer_binary(*, build: bool = True) -> Path:
    """Path of the built peer: runs ``scripts/build-ratelimit-peer`` (instant once cached).

    With ``build=False`` the path comes from the script's pinned RATELIMIT_VERSION (so a
    changed pin never picks an old binary) and a missing binary raises instead of building.
    """
    if not build:
        match = re.search(r"^RATELIMIT_VERSION=(\S+)", BUILD_SCRIPT.read_text(), re.MULTILINE)
        if match is None:
            raise RuntimeError(f"no RATELIMIT_VERSION= line in {BUILD_SCRIPT}")
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        path = cache / "gatehouse" / "ratelimit-peer" / match.group(1) / "bin" / "ratelimit"
        if not os.access(path, os.X_OK):
            raise FileNotFoundError(f"{path} missing: run {BUILD_SCRIPT}")
        return path
    result = subprocess.run([str(BUILD_SCRIPT)], check=False, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{BUILD_SCRIPT} failed ({result.returncode}):\n{result.stderr[-4000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


@dataclass(frozen=True)
class PeerDescriptor:
    """One node of the peer's config: ``key`` (e.g. ``user``), optionally one ``value``,
    a limit (``requests_per_unit`` per ``unit``) and/or nested ``descriptors``.

    Without ``value`` every distinct value of the key gets its own counter, as our
    per-key policies do; with it only that value is limited (others are not limited).

    The peer matches a request descriptor's entries one level per entry and applies a
    limit only where the last entry lands (a descriptor with more or fewer entries than
    the config's depth gets no limit, and costs no Redis call). Envoy's descriptors from
    our translator have two entries, ``[("limit", <limit id>), (<key kind>, <value>)]``,
    so the peer's config for them is ``limit=<limit id>`` (``requests_per_unit=None``)
    with one nested descriptor keyed on the key kind.
    """

    key: str
    requests_per_unit: int | None
    unit: str = "second"
    value: str | None = None
    descriptors: tuple[PeerDescriptor, ...] = ()

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"unit {self.unit!r} not one of {UNITS}")
        if self.requests_per_unit is None and not self.descriptors:
            raise ValueError("a descriptor needs requests_per_unit or nested descriptors")
        if self.requests_per_unit is not None and not 0 <= self.requests_per_unit < 1 << 32:
            raise ValueError("requests_per_unit must be in 0..2**32-1 (the peer's uint32)")


def _descriptor_lines(d: PeerDescriptor, indent: str) -> list[str]:
    lines = [f"{indent}- key: {json.dumps(d.key)}"]
    inner = indent + "  "
    if d.value is not None:
        lines.append(f"{inner}value: {json.dumps(d.value)}")
    if d.requests_per_unit is not None:
        lines.append(f"{inner}rate_limit:")
        lines.append(f"{inner}  unit: {d.unit}")
        lines.append(f"{inner}  requests_per_unit: {d.requests_per_unit}")
    if d.descriptors:
        lines.append(f"{inner}descriptors:")
        for child in d.descriptors:
            lines.extend(_descriptor_lines(child, inner + "  "))
    return lines


def config_yaml(domain: str, descriptors: list[PeerDescriptor]) -> str:
    """The peer's config file for ``domain``: one top-level descriptor per entry, nested
    descriptors below them.

    Strings are JSON-quoted (valid YAML), so no YAML library is needed and no value can
    change the structure. The peer rejects unknown keys, so only documented ones are used.
    """
    lines = [f"domain: {json.dumps(domain)}", "descriptors:"]
    for d in descriptors:
        lines.extend(_descriptor_lines(d, "  "))
    return "\n".join(lines) + "\n"


def _parse_redis(redis: str | int) -> tuple[str, int]:
    """``6379``, ``"127.0.0.1:6379"`` or ``"redis://127.0.0.1:6379[/0]"`` -> (host, port).

    The peer has no database number (its REDIS_URL is host:port), so only db 0 is accepted.
    """
    if isinstance(redis, int):
        return HOST, redis
    rest = redis.removeprefix("redis://")
    hostport, _, db = rest.partition("/")
    if db not in ("", "0"):
        raise ValueError(f"the peer has no Redis database setting: {redis!r} must use db 0")
    host, _, port = hostport.rpartition(":")
    host = host or HOST
    if host not in ("127.0.0.1", "localhost"):
        raise ValueError(f"Redis must be on 127.0.0.1, not {host!r}")
    return HOST, int(port)


class RatelimitPeer:
    """envoyproxy/ratelimit on 127.0.0.1: config from files, Redis backend, no stats sink.

    Environment (all else is the peer's default; the child gets only these and PATH, so
    nothing in the caller's environment, e.g. a stray ``PORT`` or ``REDIS_AUTH``, leaks in):

    - ``HOST``/``GRPC_HOST``/``DEBUG_HOST=127.0.0.1``: the defaults are 0.0.0.0.
    - ``GRPC_PORT`` (Envoy talks to this), ``PORT`` (HTTP /json, /healthcheck) and
      ``DEBUG_PORT`` (/rlconfig, /stats, pprof): it always opens all three. It binds them with
      SO_REUSEPORT, so it could share a port that another SO_REUSEPORT listener (e.g. an
      Envoy) already holds: :meth:`start` refuses ports that already accept connections.
    - ``CONFIG_TYPE=FILE``, ``RUNTIME_ROOT=<tmp>/runtime``, ``RUNTIME_SUBDIRECTORY=ratelimit``,
      ``RUNTIME_APPDIRECTORY=config``, ``RUNTIME_WATCH_ROOT=false``: the config is read from
      ``<tmp>/runtime/ratelimit/config/*.yaml``, watched in place (no symlink swap). An empty
      RUNTIME_SUBDIRECTORY would silently load no config at all.
    - ``BACKEND_TYPE=redis``, ``REDIS_SOCKET_TYPE=tcp`` (default unix), ``REDIS_TYPE=SINGLE``,
      ``REDIS_URL=127.0.0.1:<port>``, ``REDIS_POOL_SIZE`` (default 10, the peer's).
    - ``REDIS_PIPELINE_WINDOW`` (see DEFAULT_PIPELINE_WINDOW). ``REDIS_PIPELINE_LIMIT`` is not
      set: it is deprecated and ignored by radix v4 at this version.
    - ``LOCAL_CACHE_SIZE_IN_BYTES`` (see DEFAULT_LOCAL_CACHE_BYTES; 0 disables it).
    - ``CACHE_KEY_PREFIX`` (default ``rlpeer:``): its keys never collide with ours on the
      shared Redis and can be counted with ``SCAN MATCH rlpeer:*``.
    - ``USE_STATSD=false`` and ``DISABLE_STATS=true``: no statsd to send to (the default is
      a TCP statsd sink on localhost:8125), and with USE_STATSD=false alone it would log every
      stat to its log each flush. With ``prometheus_port`` it exports Prometheus metrics on
      127.0.0.1 instead (``USE_PROMETHEUS=true``).
    - ``LOG_LEVEL=warn`` (``info``/``debug`` log per request at debug), ``LOG_FORMAT=text``.
    - ``GOMAXPROCS`` only when ``gomaxprocs`` is given (else Go uses every core).
    """

    def __init__(
        self,
        *,
        redis: str | int,
        grpc_port: int,
        http_port: int,
        debug_port: int,
        domain: str,
        descriptors: list[PeerDescriptor],
        binary: Path | None = None,
        log_dir: Path | None = None,
        local_cache_bytes: int = DEFAULT_LOCAL_CACHE_BYTES,
        pipeline_window: str = DEFAULT_PIPELINE_WINDOW,
        redis_pool_size: int = 10,
        cache_key_prefix: str = "rlpeer:",
        prometheus_port: int | None = None,
        gomaxprocs: int | None = None,
        log_level: str = "warn",
        name: str = "ratelimit-peer",
    ) -> None:
        if not descriptors:
            raise ValueError("at least one descriptor is needed")
        self.redis_host, self.redis_port = _parse_redis(redis)
        self.grpc_port = grpc_port
        self.http_port = http_port
        self.debug_port = debug_port
        self.prometheus_port = prometheus_port
        self.domain = domain
        self.descriptors = list(descriptors)
        self.binary = binary
        self.local_cache_bytes = local_cache_bytes
        self.pipeline_window = pipeline_window
        self.redis_pool_size = redis_pool_size
        self.cache_key_prefix = cache_key_prefix
        self.gomaxprocs = gomaxprocs
        self.log_level = log_level
        self.name = name
        self._tmp = tempfile.TemporaryDirectory(prefix="ratelimit-peer-")
        self.workdir = Path(self._tmp.name)
        self.log_dir = log_dir or self.workdir
        self.config_path = self.workdir / "runtime" / "ratelimit" / "config" / f"{domain}.yaml"
        self.process: ManagedProcess | None = None

    @property
    def grpc_address(self) -> str:
        """``127.0.0.1:<grpc_port>``, for a gRPC channel or Envoy's rate-limit cluster."""
        return f"{HOST}:{self.grpc_port}"

    def ports(self) -> list[int]:
        """Every port the peer listens on."""
        ports = [self.grpc_port, self.http_port, self.debug_port]
        if self.prometheus_port is not None:
            ports.append(self.prometheus_port)
        return ports

    def env(self) -> dict[str, str]:
        """The child's whole environment (see the class docstring for why each is set)."""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOST": HOST,
            "PORT": str(self.http_port),
            "GRPC_HOST": HOST,
            "GRPC_PORT": str(self.grpc_port),
            "DEBUG_HOST": HOST,
            "DEBUG_PORT": str(self.debug_port),
            "CONFIG_TYPE": "FILE",
            "RUNTIME_ROOT": str(self.workdir / "runtime"),
            "RUNTIME_SUBDIRECTORY": "ratelimit",
            "RUNTIME_APPDIRECTORY": "config",
            "RUNTIME_WATCH_ROOT": "false",
            "BACKEND_TYPE": "redis",
            "REDIS_SOCKET_TYPE": "tcp",
            "REDIS_TYPE": "SINGLE",
            "REDIS_URL": f"{self.redis_host}:{self.redis_port}",
            "REDIS_POOL_SIZE": str(self.redis_pool_size),
            "REDIS_PIPELINE_WINDOW": self.pipeline_window,
            "LOCAL_CACHE_SIZE_IN_BYTES": str(self.local_cache_bytes),
            "CACHE_KEY_PREFIX": self.cache_key_prefix,
            "USE_STATSD": "false",
            "LOG_LEVEL": self.log_level,
            "LOG_FORMAT": "text",
        }
        if self.prometheus_port is not None:
            env["DISABLE_STATS"] = "false"
            env["USE_PROMETHEUS"] = "true"
            env["PROMETHEUS_ADDR"] = f"{HOST}:{self.prometheus_port}"
        else:
            env["DISABLE_STATS"] = "true"
        if self.gomaxprocs is not None:
            env["GOMAXPROCS"] = str(self.gomaxprocs)
        return env

    def write_config(self) -> Path:
        """Write the descriptor config where the peer reads it; return its path."""
        self.config_path.parent.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(config_yaml(self.domain, self.descriptors))
        return self.config_path

    def loaded_config(self) -> str | None:
        """The config the running peer has loaded (its debug ``/rlconfig``), or None."""
        url = f"http://{HOST}:{self.debug_port}/rlconfig"
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:  # noqa: S310 (loopback only)
                body: bytes = resp.read()
                return body.decode()
        except (urllib.error.URLError, OSError):
            return None

    def start(self, timeout: float = 30.0) -> RatelimitPeer:
        """Write the config, start the peer, and wait until it serves with the config loaded.

        The peer blocks on its first config load before it opens any listener, so an open
        gRPC port already means "configured"; ``/rlconfig`` naming our domain also proves
        the config was accepted (a rejected file leaves it running with no limits at all).
        """
        if self.process is not None:
            raise RuntimeError(f"{self.name} already started")
        busy = [p for p in self.ports() if port_open(p, HOST)]
        if busy:
            raise RuntimeError(f"{self.name}: ports {busy} on {HOST} already accept connections")
        binary = self.binary or peer_binary()
        self.write_config()
        self.process = ManagedProcess.start([str(binary)], name=self.name, log_dir=self.log_dir, env=self.env())
        proc = self.process
        deadline = time.monotonic() + timeout
        try:
            proc.wait_until(lambda: port_open(self.grpc_port, HOST), timeout, f"gRPC on {self.grpc_address}")
            proc.wait_until(
                lambda: f"{self.domain}." in (self.loaded_config() or ""),
                max(0.5, deadline - time.monotonic()),
                f"config for domain {self.domain!r} in /rlconfig",
            )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> int | None:
        """SIGTERM the peer (SIGKILL after 10 s) by its pid; return its exit code."""
        return self.process.stop() if self.process is not None else None

    def close(self) -> None:
        """Stop the peer and remove its temp dir (its log too, unless ``log_dir`` was given)."""
        self.stop()
        self._tmp.cleanup()

    def __enter__(self) -> RatelimitPeer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RatelimitPeer(grpc={self.grpc_address}, domain={self.domain!r}, process={self.process!r})"
